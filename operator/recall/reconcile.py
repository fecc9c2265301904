"""The reconciler: a pure plan of what a Batch (or a set of jobs) needs, and one apply.

    plan = plan_batch(batch, items, jobs, stored, now_mono, seen, full=...)   # pure
    report = apply(store, plan, ...)                                          # all the I/O

The plan lists the jobs to reclaim (their lease expired on the operator's clock), to fail
(no attempts left), to take out of backoff (its time passed on the operator's clock), to label
(suspend), and the items whose jobs to create. `apply` performs those job writes (each fenced),
then writes the Batch status: the projection of the jobs as they are after those writes, guarded
by the Batch's resourceVersion (a 409 reads the Batch again and projects again). A job and its
item are therefore restored by the same apply. Heals are counted, and their Events posted, only
when the status that records them was written.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from recall import faults, lease, metrics
from recall.cache import BackoffObservation, BatchKey, JobRecord, Marks
from recall.fanout import job_for_item
from recall.fencing import fenced_write
from recall.items import Item
from recall.lease import Budget
from recall.models import Batch, ItemPhase, Phase, TranscriptionJob
from recall.observer import JobKey, Observation
from recall.projection import CODE, CODES, Projection, fanned_out, project, stored_phases
from recall.store import Conflict, JobStore, ObjectRef, StoreError
from recall.store.patch import merge_patch

MAX_EVENTS = 20  # Events of one kind per apply; the rest are summed up in one more


def budget(record: JobRecord) -> Budget:
    return Budget(max_attempts=record.max_attempts, max_releases=record.max_releases)


@dataclass(frozen=True)
class Plan:
    """What one Batch (or, with `batch` None, a set of jobs without one) needs now."""

    batch: BatchKey | None
    reclaim: list[tuple[JobRecord, Observation]] = field(default_factory=list)
    exhaust: list[JobRecord] = field(default_factory=list)
    end_backoff: list[JobRecord] = field(default_factory=list)
    label: list[tuple[JobRecord, bool]] = field(default_factory=list)
    create: list[Item] = field(default_factory=list)
    recreate: frozenset[int] = frozenset()  # indexes among `create` whose job went missing
    more: bool = False  # more jobs to create than one apply creates
    project: bool = False

    @property
    def job_writes(self) -> int:
        n = len(self.reclaim) + len(self.exhaust) + len(self.end_backoff) + len(self.label)
        return n + len(self.create)


def plan_jobs(
    jobs: Sequence[JobRecord],
    now_mono: float,
    leases: Mapping[JobKey, Observation],
    backoffs: Mapping[JobKey, BackoffObservation],
) -> Plan:
    """Reclaims, exhausted jobs and ended backoffs among `jobs` (no Batch involved)."""
    reclaim, exhaust, end = [], [], []
    for r in jobs:
        seen = leases.get(r.key)
        if r.phase is Phase.LEASED and seen is not None and seen.expired(now_mono):
            if r.lease is not None and seen.matches(r.lease):
                reclaim.append((r, seen))
        elif r.phase is Phase.QUEUED:
            if budget(r).left_of(r.attempts, r.releases) <= 0:
                exhaust.append(r)
            elif r.backoff_seconds is not None:
                wait = backoffs.get(r.key)
                if wait is not None and wait.over(now_mono):
                    end.append(r)
    return Plan(None, reclaim=reclaim, exhaust=exhaust, end_backoff=end)


def plan_batch(
    batch: Batch,
    items: Sequence[Item],
    jobs: Mapping[int, JobRecord],
    watched: Sequence[JobRecord],
    now_mono: float,
    leases: Mapping[JobKey, Observation],
    backoffs: Mapping[JobKey, BackoffObservation],
    *,
    full: bool,
    dirty: bool,
    max_creates: int,
) -> Plan:
    """What `batch` needs: the reclaims, exhaustion and backoffs among its `watched` jobs
    (always), and on a full reconcile the jobs to create and the suspend labels to set."""
    base = plan_jobs(watched, now_mono, leases, backoffs)
    if batch.metadata.deletion_timestamp is not None:
        return Plan(batch.key, reclaim=base.reclaim)
    create: list[Item] = []
    recreate: set[int] = set()
    label: list[tuple[JobRecord, bool]] = []
    more = False
    if full:
        stored = batch.status
        before = stored_phases(stored, len(items)) if fanned_out(stored) else None
        for item in items:
            if item.index in jobs:
                continue
            if before is not None:
                if CODES[before[item.index]].terminal:
                    continue  # a finished item's job was deleted on purpose: do not run it again
                recreate.add(item.index)
            if len(create) >= max_creates:
                more = True
                break
            create.append(item)
        for r in jobs.values():
            if r.suspended != batch.spec.suspend and not r.phase.terminal:
                label.append((r, batch.spec.suspend))
    return Plan(
        batch.key,
        reclaim=base.reclaim,
        exhaust=base.exhaust,
        end_backoff=base.end_backoff,
        label=label,
        create=create,
        recreate=frozenset(recreate & {i.index for i in create}),
        more=more,
        project=full or dirty or base.job_writes > 0 or bool(create),
    )


@dataclass
class Report:
    """What one apply did."""

    batch: BatchKey | None
    reclaimed: list[tuple[str, str]] = field(default_factory=list)  # (job, phase it got)
    exhausted: list[str] = field(default_factory=list)
    backoffs_ended: list[str] = field(default_factory=list)
    labelled: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    heals: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    status_written: bool = False
    status_conflicts: int = 0


def _record(job: TranscriptionJob) -> JobRecord:
    return JobRecord.from_raw(job.model_dump(mode="json", by_alias=True, exclude_none=True))


def _ref(obj: TranscriptionJob | Batch | JobRecord) -> ObjectRef:
    if isinstance(obj, JobRecord):
        return ObjectRef("TranscriptionJob", obj.namespace, obj.name, obj.uid)
    return ObjectRef(obj.kind, obj.namespace, obj.name, obj.metadata.uid)


class Applier:
    """Performs plans against a store. `now` stamps what it writes; `now_mono` is the clock the
    plan's expiries were judged on."""

    def __init__(self, store: JobStore) -> None:
        self.store = store

    def event(self, about: ObjectRef, type_: str, reason: str, message: str) -> None:
        # An Event is best effort; the status and the logs say it too.
        with contextlib.suppress(StoreError):
            self.store.post_event(about, type_, reason, message)

    def apply_jobs(
        self, plan: Plan, now: dt.datetime, now_mono: float, report: Report
    ) -> dict[JobKey, JobRecord]:
        """The job writes of `plan`; returns the jobs as written."""
        written: dict[JobKey, JobRecord] = {}
        for record, seen in plan.reclaim:
            result = fenced_write(
                self.store,
                record.namespace,
                record.name,
                lambda j, s=seen, r=record: lease.reclaim(  # type: ignore[misc]
                    j.status, now, now_mono, s, budget=budget(r)
                ),
                action="reclaim",
            )
            if result.applied and result.job is not None:
                job = result.job
                written[record.key] = _record(job)
                report.reclaimed.append((job.name, job.status.effective_phase))
                metrics.RECLAIMS.inc()
                metrics.RECLAIM_DELAY.observe(max(0.0, now_mono - seen.expires_at()))
                holder = record.lease.holder if record.lease else "?"
                self.event(
                    _ref(job),
                    "Warning",
                    "Reclaimed",
                    f"lease of {holder} expired; job is {job.status.effective_phase} "
                    f"(attempt {job.status.attempts}, {job.status.expired_leases} expired)",
                )
        for record in plan.exhaust:
            result = fenced_write(
                self.store,
                record.namespace,
                record.name,
                lambda j, r=record: lease.exhaust(j.status, now, budget=budget(r)),  # type: ignore[misc]
                action="exhaust",
            )
            if result.applied and result.job is not None:
                written[record.key] = _record(result.job)
                report.exhausted.append(record.name)
        for record in plan.end_backoff:
            result = fenced_write(
                self.store,
                record.namespace,
                record.name,
                lambda j: lease.end_backoff(j.status),
                action="end-backoff",
            )
            if result.applied and result.job is not None:
                written[record.key] = _record(result.job)
                report.backoffs_ended.append(record.name)
        for record, suspended in plan.label:
            try:
                job = self.store.patch_job_labels(
                    record.namespace,
                    record.name,
                    {"recall.dev/suspended": "true" if suspended else None},
                )
            except StoreError as e:
                report.errors.append(f"label {record.name}: {e.message}")
                continue
            written[record.key] = _record(job)
            report.labelled.append(record.name)
        return written

    def apply_batch(
        self,
        plan: Plan,
        batch: Batch,
        items: Sequence[Item],
        jobs: Mapping[int, JobRecord],
        marks: Marks,
        *,
        now: dt.datetime,
        now_mono: float,
        invalid: str | None = None,
    ) -> Report:
        """The job writes of `plan`, the jobs to create, then the Batch status."""
        report = Report(plan.batch)
        written = self.apply_jobs(plan, now, now_mono, report)
        if report.reclaimed:
            faults.hit("operator-after-reclaim-write", batch=batch.name)
        current = {i: written.get(r.key, r) for i, r in jobs.items()}
        recreated = 0
        for item in plan.create:
            job = self._create(batch, item, report)
            if job is None:
                continue
            current[item.index] = job
            if item.index in plan.recreate:
                recreated += 1
                report.heals.append(f"job for item {item.key} was missing; created {job.name}")
                metrics.HEALS.labels(kind="job-missing").inc()
        if plan.project or written or report.created:
            self.write_status(batch, items, current, marks, report, now, recreated, invalid)
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
            except StoreError as e:
                report.errors.append(f"read {name}: {e.message}")
                return None
            if existing is not None and existing.spec.batch_ref != batch.name:
                report.conflicts.append(
                    f"item {item.key}: a TranscriptionJob named {existing.name} exists and "
                    f"belongs to {existing.spec.batch_ref or 'no Batch'}"
                )
                return None
            return None if existing is None else _record(existing)
        except StoreError as e:
            report.errors.append(f"create {name}: {e.message}")
            return None
        report.created.append(job.name)
        return _record(job)

    def write_status(
        self,
        batch: Batch,
        items: Sequence[Item],
        jobs: Mapping[int, JobRecord],
        marks: Marks,
        report: Report,
        now: dt.datetime,
        recreated: int = 0,
        invalid: str | None = None,
    ) -> None:
        """Write the projection of `jobs`, guarded by the Batch's version; on 409 read the Batch
        again and project again (three tries; what is left waits for the next tick, its marks
        kept)."""

        def key_of(i: int) -> str:
            return items[i].key if i < len(items) else str(i)

        current: Batch | None = batch
        for _ in range(3):
            assert current is not None
            changed, upto = marks.snapshot(current.key)
            proj = project(
                current,
                len(items),
                key_of,
                jobs,
                current.status,
                now,
                changed,
                recreated=recreated,
                invalid=invalid,
            )
            patch = merge_patch(current.status.to_api(), proj.status.to_api())
            if not patch:
                marks.clear(current.key, upto)
                return
            done_before = current.status.counts.completed if current.status.counts else 0
            done_now = proj.status.counts.completed if proj.status.counts else 0
            faults.hit("operator-before-projection", completing=done_now > done_before)
            faults.pause("operator-pause-before-projection", batch=current.name)
            try:
                self.store.patch_batch_status(
                    current.namespace, current.name, current.resource_version, patch
                )
            except Conflict:
                report.status_conflicts += 1
                try:
                    current = self.store.get_batch(batch.namespace, batch.name)
                except StoreError as e:
                    report.errors.append(f"read Batch {batch.name}: {e.message}")
                    return
                if current is None:
                    return
                continue
            except StoreError as e:
                report.errors.append(f"write Batch {batch.name} status: {e.message}")
                return
            marks.clear(current.key, upto)
            report.status_written = True
            metrics.BATCH_WRITES.inc()
            self._recorded(current, proj, report)
            return

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
