"""Batch status as a projection of its jobs, and the reconciler's diff. Pure functions.

The jobs are the ledger; `Batch.status.items` is derived from them (DESIGN §4). Two uses:

- `project(batch, jobs, stored, now, changed)`: the status the Batch should have. Items whose
  job changed since the last projection (`changed`) are simply updated. Any other item that
  disagrees with its job is a *heal*: the projection was lost (the operator crashed between
  two writes) or someone edited it. Heals are returned so the operator can record an Event
  and count them.
- `missing_jobs(batch, jobs)`: items that have no job (never created, or deleted): the
  operator creates them again.

Also derived here: counts, progress, an ETA from the observed throughput, start/completion
times, totals of expired leases and failures, and the Complete/Failed/Progressing conditions.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from recall.models import (
    ITEM_PHASE_OF_JOB,
    Batch,
    BatchItem,
    BatchStatus,
    Counts,
    ItemPhase,
    ItemStatus,
    TranscriptionJob,
    set_condition,
)


@dataclass(frozen=True)
class Heal:
    """One item the projection found wrong: what it said, and what its job says."""

    item: str
    kind: str  # "item-phase" or "item-missing"
    was: ItemPhase | None
    now: ItemPhase

    def describe(self) -> str:
        if self.was is None:
            return f"item {self.item} was missing from status; added as {self.now}"
        return f"item {self.item} said {self.was} but its job is {self.now}"


@dataclass(frozen=True)
class Projection:
    status: BatchStatus
    heals: list[Heal]


def item_of(job: TranscriptionJob) -> ItemStatus:
    """The batch item a job projects to."""
    s = job.status
    message = None
    if s.last_error is not None and ITEM_PHASE_OF_JOB[s.effective_phase] is ItemPhase.FAILED:
        message = f"{s.last_error.reason}: {s.last_error.message or ''}"[:1024]
    return ItemStatus(
        phase=ITEM_PHASE_OF_JOB[s.effective_phase],
        job=job.name,
        attempts=s.attempts,
        expired_leases=s.expired_leases,
        message=message,
    )


def missing_jobs(batch: Batch, jobs: dict[str, TranscriptionJob]) -> list[BatchItem]:
    """Items of `batch` that have no job."""
    return [item for item in batch.spec.items if item.key not in jobs]


def count(items: dict[str, ItemStatus], total: int) -> Counts:
    by = {p: 0 for p in ItemPhase}
    for it in items.values():
        by[it.phase] += 1
    return Counts(
        total=total,
        queued=by[ItemPhase.QUEUED],
        transcribing=by[ItemPhase.TRANSCRIBING],
        completed=by[ItemPhase.COMPLETED],
        failed=by[ItemPhase.FAILED],
        cancelled=by[ItemPhase.CANCELLED],
    )


def eta(counts: Counts, started: dt.datetime | None, now: dt.datetime) -> dt.datetime | None:
    """Now plus the remaining items at the throughput observed since the first claim."""
    done = counts.completed + counts.failed + counts.cancelled
    remaining = counts.total - done
    if remaining <= 0 or started is None or done == 0:
        return None
    elapsed = (now - started).total_seconds()
    if elapsed <= 0:
        return None
    seconds = remaining * elapsed / done
    return (now + dt.timedelta(seconds=seconds)).replace(microsecond=0)


def project(
    batch: Batch,
    jobs: dict[str, TranscriptionJob],
    stored: BatchStatus,
    now: dt.datetime,
    changed: set[str],
    recreated: int = 0,
) -> Projection:
    """The Batch status derived from `jobs` (by item key), and the heals it implies.

    `stored` is the status as last read; `changed` the item keys whose jobs changed since the
    last projection (their differences are updates, not heals); `recreated` the jobs the
    reconciler created again, which count as heals too.
    """
    items: dict[str, ItemStatus] = {}
    heals: list[Heal] = []
    for item in batch.spec.items:
        job = jobs.get(item.key)
        before = stored.items.get(item.key)
        if job is None:
            # No job yet (fan-out pending) or it was deleted: keep what was said until the
            # reconciler creates it.
            items[item.key] = before or ItemStatus(phase=ItemPhase.QUEUED)
            continue
        after = item_of(job)
        items[item.key] = after
        if item.key in changed:
            continue
        if before is None:
            if stored.items:  # fan-out was recorded, yet this item is absent
                heals.append(Heal(item.key, "item-missing", None, after.phase))
        elif before.phase != after.phase:
            heals.append(Heal(item.key, "item-phase", before.phase, after.phase))

    counts = count(items, len(batch.spec.items))
    done = counts.completed + counts.failed + counts.cancelled
    starts = [j.status.started_at for j in jobs.values() if j.status.started_at]
    started = stored.started_at or (min(starts) if starts else None)
    finished = done == counts.total
    ends = [j.status.completed_at for j in jobs.values() if j.status.completed_at]
    completed_at = (stored.completed_at or (max(ends) if ends else now)) if finished else None

    conditions = list(stored.conditions)
    if finished:
        conditions = set_condition(
            conditions,
            "Complete",
            "True",
            "AllItemsFinished",
            f"{counts.completed} completed, {counts.failed} failed, {counts.cancelled} cancelled",
            now,
        )
        conditions = set_condition(
            conditions, "Progressing", "False", "Finished", "no items left", now
        )
    else:
        conditions = set_condition(
            conditions,
            "Complete",
            "False",
            "ItemsRemaining",
            f"{counts.total - done} of {counts.total} items left",
            now,
        )
        if batch.spec.suspend:
            conditions = set_condition(
                conditions,
                "Progressing",
                "False",
                "Suspended",
                "spec.suspend is true: no new claims",
                now,
            )
        else:
            conditions = set_condition(
                conditions,
                "Progressing",
                "True",
                "ItemsRemaining",
                f"{counts.transcribing} transcribing, {counts.queued} queued",
                now,
            )
    if counts.failed:
        conditions = set_condition(
            conditions, "Failed", "True", "ItemsFailed", f"{counts.failed} item(s) failed", now
        )
    else:
        conditions = set_condition(
            conditions, "Failed", "False", "NoFailures", "no item failed", now
        )

    status = BatchStatus(
        observed_generation=batch.metadata.generation,
        items=items,
        counts=counts,
        progress=f"{100 * done // max(1, counts.total)}%",
        eta=None if finished else eta(counts, started, now),
        started_at=started,
        completed_at=completed_at,
        expired_leases=sum(j.status.expired_leases for j in jobs.values()),
        failures=sum(j.status.failures for j in jobs.values()),
        heals=(stored.heals or 0) + len(heals) + recreated,
        conditions=conditions,
    )
    return Projection(status, heals)
