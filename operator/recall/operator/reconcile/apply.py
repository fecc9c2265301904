"""The reconciler's apply: performs a plan against the store and reports what it did.

`Applier.apply_batch` performs the plan's job writes (each fenced), creates the missing jobs,
then writes the Batch status: the projection of the jobs as they are after those writes. A job
and its item are therefore restored by the same apply. The status is written whole (no
resourceVersion needed: the leading operator is its only writer), compared with what was last
written. A replica that is no longer sure it leads (`Leadership.holds`, e.g. it woke from a
freeze past its renew deadline) writes nothing, and each status carries the writer's leader
term, which the API server requires never to go down (the Batch CRD's rule on
`status.operatorTerm`): a replica that lost the lead cannot overwrite its successor's status
even if its write was already on its way. A status written by anyone else (`observe`) makes the next
apply start from the server's status again. Heals are counted, and their Events posted, only
when the status that records them was written.
Offers and their withdrawal (`recall.operator.dispatch`) are written here too.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from recall.base import faults, log, metrics
from recall.base.clock import SYSTEM, Clock
from recall.fencing import Transition, fenced_write
from recall.kube import (
    ApiError,
    Conflict,
    Invalid,
    JobApi,
    NotFound,
    ObjectRef,
    RawObject,
)
from recall.kube.patch import merge_patch
from recall.operator.peers.leader import Leadership, Sole
from recall.operator.reconcile.fanout import job_for_item
from recall.operator.reconcile.items import Item
from recall.operator.reconcile.marks import Marks
from recall.operator.reconcile.plan import Plan, budget
from recall.operator.reconcile.project import CODE, Projection, project, stored_phases
from recall.operator.reconcile.record import BatchKey, JobRecord
from recall.protocol import lease
from recall.protocol.observer import JobKey
from recall.resources import (
    Batch,
    BatchStatus,
    ItemPhase,
    JobStatus,
    Offer,
    TranscriptionJob,
)
from recall.resources.errors import JobFailure

_log = log.get("operator")
MAX_EVENTS = 20  # Events of one kind per apply; the rest are summed up in one more
CREATE_SECONDS = 0.3  # creating jobs stops after this long in one tick (the loop must turn)


class Reclaimed(NamedTuple):
    """One reclaim: the job, the phase it got, how late on the operator's clock (seconds past
    the expiry it observed) and, for a look from outside, seconds since the lease's renewTime
    by this machine's wall clock (the worker's clock: skew shows here, never in a decision)."""

    job: str
    phase: str
    overdue: float
    since_renewal: float | None


@dataclass
class Report:
    """What one apply did."""

    batch: BatchKey | None
    reclaimed: list[Reclaimed] = field(default_factory=list)
    expired_holders: list[tuple[str, str]] = field(default_factory=list)  # (namespace, worker)
    exhausted: list[str] = field(default_factory=list)
    backoffs_ended: list[str] = field(default_factory=list)
    labelled: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    heals: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    status_written: bool = False
    more: bool = False  # jobs left to create (the time budget of one apply ran out)


def _status_of(record: JobRecord) -> JobStatus:
    """The part of a job's status an offer depends on, from the operator's compact record."""
    return JobStatus(
        phase=record.phase,
        attempts=record.attempts,
        releases=record.releases,
        backoff_seconds=record.backoff_seconds,
        offer=Offer(worker=record.offer) if record.offer else None,
    )


def _record(job: TranscriptionJob) -> JobRecord:
    return JobRecord.from_raw(job.model_dump(mode="json", by_alias=True, exclude_none=True))


def _ref(obj: TranscriptionJob | Batch | JobRecord) -> ObjectRef:
    if isinstance(obj, JobRecord):
        return ObjectRef("TranscriptionJob", obj.namespace, obj.name, obj.uid)
    return ObjectRef(obj.kind, obj.namespace, obj.name, obj.metadata.uid)


class Applier:
    """Performs plans against a store. `now` stamps what it writes; `now_mono` is the clock the
    plan's expiries were judged on."""

    def __init__(
        self,
        store: JobApi,
        leadership: Leadership | None = None,
        *,
        storage: Callable[[BatchKey], tuple[str, str] | None] = lambda _key: None,
        clock: Clock = SYSTEM,
    ) -> None:
        self.store = store
        self.clock = clock  # times the creation budget (`CREATE_SECONDS`)
        self.leadership: Leadership = leadership or Sole()
        self.storage = storage  # the results store's last refusal for a Batch, if any
        self.written: dict[BatchKey, BatchStatus] = {}
        self._versions: dict[BatchKey, deque[str]] = {}  # resourceVersions of our own writes
        self._statuses: dict[BatchKey, deque[RawObject]] = {}  # and the statuses they wrote
        self._lock = threading.Lock()  # `written` and `_versions`: kopf's thread reads them

    def observe(self, batch: Batch) -> bool:
        """A Batch as the watch delivered it. True when its status was written by someone else
        (another replica that thought it led): what this one wrote is then forgotten."""
        with self._lock:
            ours = self._versions.get(batch.key, ())
            written = self.written.get(batch.key)
            if written is None or batch.metadata.resource_version in ours:
                return False
            seen = batch.status.to_api()
            if any(seen == mine for mine in self._statuses.get(batch.key, ())):
                return False  # one of ours, delivered late (another client's change since)
            _log.info(
                "batch_status_foreign",
                batch=batch.name,
                namespace=batch.namespace,
                resource_version=batch.metadata.resource_version,
            )
            self._forget(batch.key)
            return True

    def offer(self, record: JobRecord, worker: str) -> bool:
        """Offer a claimable job to `worker`: one write, guarded by the version it was chosen
        from (a 409 means it changed meanwhile: it is not offered)."""
        decision = lease.offer(_status_of(record), worker)
        if isinstance(decision, lease.Refusal):
            return False
        try:
            self.store.patch_job_status(
                record.namespace,
                record.name,
                record.resource_version,
                {"offer": {"worker": worker}},
            )
        except ApiError:
            return False
        metrics.OFFERS.inc()
        return True

    def withdraw(self, record: JobRecord) -> bool:
        """Take back an offer its worker did not take up in time."""
        decision = lease.withdraw(_status_of(record))
        if isinstance(decision, lease.Refusal):
            return False
        try:
            self.store.patch_job_status(
                record.namespace, record.name, record.resource_version, {"offer": None}
            )
        except ApiError:
            return False
        metrics.OFFERS_WITHDRAWN.inc()
        return True

    def reject(self, record: JobRecord, failure: JobFailure) -> bool:
        """Fail a Queued job, unleased, that no live worker of its pool can do (one fenced
        write, `lease.reject`, with the failure its worker would write)."""
        report = Report(None)
        now = self.clock.now()
        job = self._write(
            record,
            "reject",
            lambda j: lease.reject(j.status, now, reason=failure.reason, message=failure.message),
            report,
        )
        _log.info(
            "rejected" if job else "reject_failed",
            job=record.name,
            namespace=record.namespace,
            reason=failure.reason,
            errors=report.errors[:1] or None,
        )
        return job is not None

    def event(self, about: ObjectRef, type_: str, reason: str, message: str) -> None:
        # An Event is best effort; the status and the logs say it too.
        with contextlib.suppress(ApiError):
            self.store.post_event(about, type_, reason, message)

    def apply_jobs(
        self, plan: Plan, now: dt.datetime, now_mono: float, report: Report
    ) -> dict[JobKey, JobRecord]:
        """The job writes of `plan`, each fenced; returns the jobs as written. A write that
        fails (the API server restarting) is reported and tried again at the next tick."""
        written: dict[JobKey, JobRecord] = {}
        for record, seen in plan.reclaim:
            job = self._write(
                record,
                "reclaim",
                lambda j, s=seen, r=record: lease.reclaim(  # type: ignore[misc]
                    j.status, now, now_mono, s, budget=budget(r)
                ),
                report,
            )
            if job is not None:
                written[record.key] = _record(job)
                self._reclaimed(record, job, now, now_mono - seen.expires_at(), report)
        for record in plan.exhaust:
            job = self._write(
                record,
                "exhaust",
                lambda j, r=record: lease.exhaust(j.status, now, budget=budget(r)),  # type: ignore[misc]
                report,
            )
            if job is not None:
                written[record.key] = _record(job)
                report.exhausted.append(record.name)
        for record in plan.end_backoff:
            job = self._write(record, "end-backoff", lambda j: lease.end_backoff(j.status), report)
            if job is not None:
                written[record.key] = _record(job)
                report.backoffs_ended.append(record.name)
        for record, suspended in plan.label:
            try:
                labelled = self.store.patch_job_labels(
                    record.namespace,
                    record.name,
                    {"recall.dev/suspended": "true" if suspended else None},
                )
            except ApiError as e:
                report.errors.append(f"label {record.name}: {e.message}")
                continue
            written[record.key] = _record(labelled)
            report.labelled.append(record.name)
        return written

    def _write(
        self, record: JobRecord, action: str, transition: Transition, report: Report
    ) -> TranscriptionJob | None:
        """One fenced write of the operator's; the job as written, or None."""
        if not self.leadership.holds():
            report.errors.append(f"{action} {record.name}: not leading")
            return None
        try:
            result = fenced_write(
                self.store, record.namespace, record.name, transition, action=action
            )
        except ApiError as e:
            report.errors.append(f"{action} {record.name}: {e.message}")
            return None
        return result.job if result.applied else None

    def _reclaimed(
        self,
        record: JobRecord,
        job: TranscriptionJob,
        now: dt.datetime,
        overdue: float,
        report: Report,
    ) -> None:
        renewed = record.lease.renew_time if record.lease else None
        since = (now - renewed).total_seconds() if renewed else None
        report.reclaimed.append(Reclaimed(job.name, job.status.effective_phase, overdue, since))
        if record.lease is not None:
            report.expired_holders.append((record.namespace, record.lease.holder))
        metrics.RECLAIMS.inc()
        metrics.RECLAIM_DELAY.observe(max(0.0, overdue))
        holder = record.lease.holder if record.lease else "?"
        self.event(
            _ref(job),
            "Warning",
            "Reclaimed",
            f"lease of {holder} expired; job is {job.status.effective_phase} "
            f"(attempt {job.status.attempts}, {job.status.expired_leases} expired)",
        )

    def apply_batch(
        self,
        plan: Plan,
        marks: Marks,
        *,
        now: dt.datetime,
        create_until: float | None = None,
    ) -> Report:
        """The job writes of `plan`, the jobs to create, then the Batch status: the projection
        of the view's jobs as they are after those writes (so it is made here, not in the plan:
        a job and its item are restored by the same apply). Jobs are created until
        `create_until` (on `self.clock`; by default `CREATE_SECONDS` from now), the rest at
        the next tick."""
        view = plan.view
        assert view is not None, "a Batch's plan carries the view it was made from"
        batch, items, jobs = view.batch, view.items, view.jobs
        report = Report(plan.batch)
        written = self.apply_jobs(plan, now, view.now_mono, report)
        if report.reclaimed:
            faults.hit("operator-after-reclaim-write", batch=batch.name)
        current = {i: written.get(r.key, r) for i, r in jobs.items()}
        # What this apply wrote is a change it knows of, not a difference to heal.
        ours = {i for i, r in jobs.items() if r.key in written}
        recreated = 0
        until = self.clock.monotonic() + CREATE_SECONDS if create_until is None else create_until
        for item in plan.create:
            if self.clock.monotonic() > until:
                report.more = True  # the rest at the next tick: reclaims must not wait
                break
            job = self._create(batch, item, report)
            if job is None:
                continue
            current[item.index] = job
            ours.add(item.index)
            if item.index in plan.recreate:
                recreated += 1
                report.heals.append(f"job for item {item.key} was missing; created {job.name}")
                metrics.HEALS.labels(kind="job-missing").inc()
        if plan.project or written or report.created:
            self.write_status(
                batch,
                items,
                current,
                marks,
                view.seen,
                report,
                now,
                recreated,
                view.invalid,
                frozenset(ours),
            )
        return report

    def _create(self, batch: Batch, item: Item, report: Report) -> JobRecord | None:
        manifest = job_for_item(batch, item)
        name = manifest["metadata"]["name"]
        try:
            job = self.store.create_job(batch.namespace, manifest)
        except Conflict:
            # Created before (the cache catches up), or the name is taken by a job that is not
            # this Batch's: say so, do not touch it.
            try:
                existing = self.store.get_job(batch.namespace, name)
            except ApiError as e:
                report.errors.append(f"read {name}: {e.message}")
                return None
            if existing is not None and existing.spec.batch_ref != batch.name:
                report.conflicts.append(
                    f"item {item.key}: a TranscriptionJob named {existing.name} exists and "
                    f"belongs to {existing.spec.batch_ref or 'no Batch'}"
                )
                return None
            return None if existing is None else _record(existing)
        except ApiError as e:
            report.errors.append(f"create {name}: {e.message}")
            return None
        report.created.append(job.name)
        return _record(job)

    def baseline(self, batch: Batch) -> BatchStatus:
        """The Batch status as it is now: the last one this process wrote (it is the only
        writer while it leads), or the one read from the API server."""
        return self.written.get(batch.key, batch.status)

    def forget(self, key: BatchKey | None = None) -> None:
        """Drop what was written (for one Batch, or all after a change of leader)."""
        with self._lock:
            self._forget(key)

    def _forget(self, key: BatchKey | None = None) -> None:
        if key is None:
            self.written.clear()
            self._versions.clear()
            self._statuses.clear()
        else:
            self.written.pop(key, None)
            self._versions.pop(key, None)
            self._statuses.pop(key, None)

    def write_status(
        self,
        batch: Batch,
        items: Sequence[Item],
        jobs: Mapping[int, JobRecord],
        marks: Marks,
        seen: tuple[frozenset[int], int],
        report: Report,
        now: dt.datetime,
        recreated: int = 0,
        invalid: str | None = None,
        ours: frozenset[int] = frozenset(),
    ) -> None:
        """Write the projection of `jobs` as a whole status (every field, absent ones as null),
        so the write needs no resourceVersion: another client changing the Batch meanwhile (a
        label, the spec) cannot make it fail, and no field keeps a value from an older write.
        On failure the marks stay: the next tick writes again."""

        def key_of(i: int) -> str:
            return items[i].key if i < len(items) else str(i)

        base = batch.status
        changed, upto = seen
        proj = project(
            batch,
            len(items),
            key_of,
            jobs,
            base,
            now,
            changed | ours,
            recreated=recreated,
            invalid=invalid,
            storage=self.storage(batch.key),
        )
        term = self.leadership.term
        # What the server would hold after the write: the term written, or (the only replica,
        # no term) whatever term is stored.
        status = proj.status.model_copy(
            update={"operator_term": base.operator_term if term is None else term}
        )
        if not merge_patch(base.to_api(), status.to_api()):
            marks.clear(batch.key, upto)
            return
        body = status.to_api()
        for name, info in BatchStatus.model_fields.items():
            body.setdefault(info.alias or name, None)
        if term is None:
            body.pop("operatorTerm", None)  # keep whatever is stored
        done_before = base.counts.completed if base.counts else 0
        done_now = proj.status.counts.completed if proj.status.counts else 0
        faults.hit("operator-before-projection", completing=done_now > done_before)
        faults.pause("operator-pause-before-projection", batch=batch.name)
        if not self.leadership.holds():
            report.errors.append(f"write Batch {batch.name} status: not leading")
            return
        # A freeze here (after the check, before the write lands) is what the term is for.
        faults.pause("operator-pause-before-status-write", batch=batch.name)
        with self._lock:  # `observe` must see this write recorded, or not yet sent
            try:
                stored = self.store.patch_batch_status(batch.namespace, batch.name, None, body)
            except Invalid as e:
                report.errors.append(f"write Batch {batch.name} status: {e.message}")
                if "operatorTerm" in e.message:
                    self._term_refused(batch)
                return
            except NotFound:
                self._forget(batch.key)
                return
            except ApiError as e:
                report.errors.append(f"write Batch {batch.name} status: {e.message}")
                return
            kept = term if term is not None else stored.status.operator_term
            self.written[batch.key] = status.model_copy(update={"operator_term": kept})
            mine = self._statuses.setdefault(batch.key, deque(maxlen=16))
            mine.append(self.written[batch.key].to_api())
            versions = self._versions.setdefault(batch.key, deque(maxlen=8))
            if stored.metadata.resource_version not in versions:
                versions.append(stored.metadata.resource_version or "")
        marks.clear(batch.key, upto)
        report.status_written = True
        metrics.BATCH_WRITES.inc()
        self._recorded(batch, proj, report)

    def _term_refused(self, batch: Batch) -> None:
        """Our term is older than the stored one. A replica that lost the lead stops here; a
        leader (the Lease was made again and its count restarted) takes a higher term. Called
        with the lock held."""
        self._forget(batch.key)
        with contextlib.suppress(ApiError):
            fresh = self.store.get_batch(batch.namespace, batch.name)
            stored = fresh.status.operator_term if fresh is not None else None
            if stored is not None and self.leadership.holds():
                self.leadership.need_term(stored + 1)

    def _recorded(self, batch: Batch, proj: Projection, report: Report) -> None:
        """Count and announce what the written status recorded: heals, newly failed items."""
        heals = [h.describe() for h in proj.heals]
        for _h in proj.heals:
            metrics.HEALS.labels(kind="item-phase").inc()
        report.heals = report.heals + heals
        for text in report.heals[:MAX_EVENTS]:
            self.event(_ref(batch), "Normal", "Healed", text)
        if len(report.heals) > MAX_EVENTS:
            rest = len(report.heals) - MAX_EVENTS
            self.event(_ref(batch), "Normal", "Healed", f"and {rest} more items healed")
        before = stored_phases(batch.status, proj.status.counts.total if proj.status.counts else 0)
        failed = CODE[ItemPhase.FAILED]
        newly = [
            a
            for a in proj.status.attention
            if a.phase is ItemPhase.FAILED and before[a.index] != failed
        ]
        for a in newly[:MAX_EVENTS]:
            text = f"item {a.key} failed: {a.reason}: {a.message or ''}"
            self.event(_ref(batch), "Warning", "Failed", text)
            if a.job:
                self.event(
                    ObjectRef("TranscriptionJob", batch.namespace, a.job),
                    "Warning",
                    "Failed",
                    f"{a.reason}: {a.message or ''}",
                )
