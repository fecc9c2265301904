"""The reconciler's apply: performs a plan against the store and reports what it did.

`Applier.apply_batch` performs the plan's job writes (each fenced), creates the missing jobs,
then writes the Batch status (`status`): the projection of the jobs after those writes, so a job
and its item are restored by the same apply. It also writes offers and their withdrawal
(`recall.operator.dispatch`). A replica no longer sure it leads (`Leadership.holds`: e.g. woken
from a freeze past its renew deadline) writes nothing; the status carries its leader term.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable, Iterable

from recall.base import faults, log, metrics
from recall.base.clock import SYSTEM, Clock
from recall.fencing import Transition, fenced_write
from recall.kube import ApiError, Conflict, JobApi, ObjectRef
from recall.operator.peers.leader import Leadership, Sole
from recall.operator.reconcile.conditions import fanned_out
from recall.operator.reconcile.fanout import job_for_item
from recall.operator.reconcile.items import Item
from recall.operator.reconcile.marks import Marks
from recall.operator.reconcile.plan import BatchView, Plan, budget
from recall.operator.reconcile.project import Projection, project
from recall.operator.reconcile.record import BatchKey, JobRecord
from recall.operator.reconcile.report import Reclaimed, Report
from recall.operator.reconcile.status import StatusWriter
from recall.protocol import lease
from recall.protocol.observer import JobKey
from recall.resources import (
    LABEL_BATCH,
    Batch,
    JobStatus,
    Offer,
    Phase,
    TranscriptionJob,
    label_value,
)
from recall.resources.errors import JobFailure

_log = log.get("operator")
CREATE_SECONDS = 0.3  # creating jobs stops after this long in one tick (the loop must turn)


def _status_of(record: JobRecord) -> JobStatus:
    """The part of a job's status an offer depends on."""
    return JobStatus(
        phase=record.phase,
        attempts=record.attempts,
        releases=record.releases,
        backoff_seconds=record.backoff_seconds,
        offer=Offer(worker=record.offer) if record.offer else None,
    )


def _record(job: TranscriptionJob) -> JobRecord:
    return JobRecord.from_raw(job.model_dump(mode="json", by_alias=True, exclude_none=True))


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
        self.leadership: Leadership = leadership or Sole()  # `_write` and the status write check it
        self.storage = storage  # the results store's last refusal for a Batch, if any
        self.status = StatusWriter(store, self.event)

    def offer(self, record: JobRecord, worker: str) -> bool:
        """Offer a claimable job to `worker`: one write, guarded by the version it was chosen
        from (a 409 means it changed meanwhile: it is not offered)."""
        decision = lease.offer(_status_of(record), worker)
        return self._patch_offer(record, decision, {"worker": worker}, metrics.OFFERS.inc)

    def withdraw(self, record: JobRecord) -> bool:
        """Take back an offer its worker did not take up in time."""
        decision = lease.withdraw(_status_of(record))
        return self._patch_offer(record, decision, None, metrics.OFFERS_WITHDRAWN.inc)

    def _patch_offer(
        self,
        record: JobRecord,
        decision: lease.Decision,
        offer: dict[str, str] | None,
        count: Callable[[], None],
    ) -> bool:
        if isinstance(decision, lease.Refusal):
            return False
        try:
            self.store.patch_job_status(
                record.namespace, record.name, record.resource_version, {"offer": offer}
            )
        except ApiError:
            return False
        count()
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

    def cancel(self, batch: Batch, jobs: Iterable[JobRecord], now: dt.datetime) -> int:
        """A deleted Batch: cancel its leased `jobs` (fenced: their holders stop at their next
        write), then delete all its jobs with one request. Returns how many were cancelled.
        Raises what the API server answers (the caller, kopf's delete handler, tries again)."""
        cancelled = 0
        message = f"Batch {batch.name} was deleted"
        for r in jobs:
            if r.phase is not Phase.LEASED:
                continue  # deleted below before anyone can claim it; a claimer then finds it gone
            result = fenced_write(
                self.store,
                r.namespace,
                r.name,
                lambda j: lease.cancel(j.status, now, reason="BatchDeleted", message=message),
                action="cancel",
            )
            cancelled += result.applied
        self.store.delete_jobs(batch.namespace, f"{LABEL_BATCH}={label_value(batch.name)}")
        return cancelled

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
        for record in plan.end_backoff:
            job = self._write(record, "end-backoff", lambda j: lease.end_backoff(j.status), report)
            if job is not None:
                written[record.key] = _record(job)
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
            ObjectRef(job.kind, job.namespace, job.name, job.metadata.uid),
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
        create_until: float,
    ) -> Report:
        """The job writes of `plan`, the jobs to create until `create_until` (on `self.clock`; the
        rest at the next tick), then the Batch status projected after those writes."""
        view = plan.view
        assert view is not None, "a Batch's plan carries the view it was made from"
        report = Report(plan.batch)
        written = self.apply_jobs(plan, now, view.now_mono, report)
        if report.reclaimed:
            faults.hit("operator-after-reclaim-write", batch=view.batch.name)
        current = {i: written.get(r.key, r) for i, r in view.jobs.items()}
        # What this apply wrote is a change it knows of, not a difference to heal.
        ours = {i for i, r in view.jobs.items() if r.key in written}
        recreated = self._create_missing(plan, current, ours, create_until, report)
        if plan.project or written or report.created:
            proj = self._project(view, current, now, recreated, frozenset(ours))
            self.status.write(view.batch, proj, marks, view.seen[1], report, self.leadership)
        return report

    def _create_missing(
        self,
        plan: Plan,
        current: dict[int, JobRecord],
        ours: set[int],
        until: float,
        report: Report,
    ) -> int:
        """Create the plan's jobs until `until` (on `self.clock`), adding each to `current` and
        `ours`. Returns how many of them were jobs missing since the Batch fanned out."""
        assert plan.view is not None
        batch = plan.view.batch
        recreated = 0
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
        return recreated

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

    def _project(
        self,
        view: BatchView,
        jobs: dict[int, JobRecord],
        now: dt.datetime,
        recreated: int,
        ours: frozenset[int],
    ) -> Projection:
        """The Batch status `jobs` (by item index) give, over the view's stored status. Items
        this apply wrote, or whose jobs moved since the last written projection, are changes;
        another difference is a heal.

        Items that cannot be resolved now (their list deleted, or unreadable this once) of a
        Batch projected before change nothing the jobs say: its total stays the stored one and
        its keys come from the jobs; once it fanned out, the jobs alone carry it on."""
        items, stored, invalid = view.items, view.batch.status, view.invalid
        total = len(items)
        if invalid is not None and stored.counts is not None:
            total = stored.counts.total
            invalid = None if fanned_out(stored) else invalid

        def key_of(i: int) -> str:
            if i < len(items):
                return items[i].key
            record = jobs.get(i)
            return record.item if record is not None and record.item else str(i)

        return project(
            view.batch,
            total,
            key_of,
            jobs,
            stored,
            now,
            view.seen[0] | ours,
            recreated=recreated,
            invalid=invalid,
            storage=self.storage(view.batch.key),
        )
