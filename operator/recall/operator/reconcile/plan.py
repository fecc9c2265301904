"""The reconciler's plan: what a Batch (or a set of jobs without one) needs now. Pure: it reads
nothing but its arguments; `apply` does the I/O.

The plan lists the jobs to reclaim (lease expired on the operator's clock), to fail (no attempts
left), to take out of backoff (its time passed on the operator's clock), to label (suspend), and
the items whose jobs to create.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from recall.operator.reconcile.cache import BackoffObservation
from recall.operator.reconcile.conditions import fanned_out
from recall.operator.reconcile.items import Item
from recall.operator.reconcile.project import CODES, stored_phases
from recall.operator.reconcile.record import BatchKey, JobRecord
from recall.protocol.lease import Budget
from recall.protocol.observer import JobKey, Observation
from recall.resources import Batch, Phase


def budget(record: JobRecord) -> Budget:
    return Budget(max_attempts=record.max_attempts, max_releases=record.max_releases)


@dataclass(frozen=True)
class BatchView:
    """One Batch and its jobs as the controller read them for one decision: the plan's only
    input besides its knobs, and what the apply projects the status from."""

    batch: Batch
    items: Sequence[Item]  # the Batch's items, resolved
    jobs: Mapping[int, JobRecord]  # its jobs by item index, as read
    watched: Sequence[JobRecord]  # the jobs a reclaim, exhaustion or backoff may concern
    leases: Mapping[JobKey, Observation]  # leases as observed on the operator's clock
    backoffs: Mapping[JobKey, BackoffObservation]
    now_mono: float  # the operator's clock at the read
    # The items marked as moved, taken AFTER `jobs` was read (a change that reached `jobs` is
    # never a heal), and the marks' sequence number taken BEFORE it (a later change keeps its mark).
    seen: tuple[frozenset[int], int] = (frozenset(), 0)
    invalid: str | None = None  # why the items cannot be used, if so


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
    view: BatchView | None = None  # what the plan was made from (a Batch's plans only)

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
            if r.attempts_left <= 0:
                exhaust.append(r)
            elif r.backoff_seconds is not None:
                wait = backoffs.get(r.key)
                if wait is not None and wait.over(now_mono):
                    end.append(r)
    return Plan(None, reclaim=reclaim, exhaust=exhaust, end_backoff=end)


def plan_batch(view: BatchView, *, full: bool, dirty: bool, max_creates: int) -> Plan:
    """What `view.batch` needs: the reclaims, exhaustion and backoffs among its watched jobs
    (always), and on a full reconcile the jobs to create (at most `max_creates`, in item
    order) and the suspend labels to set."""
    batch, items, jobs = view.batch, view.items, view.jobs
    base = plan_jobs(view.watched, view.now_mono, view.leases, view.backoffs)
    if batch.metadata.deletion_timestamp is not None:
        return Plan(batch.key, reclaim=base.reclaim, view=view)
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
        view=view,
    )
