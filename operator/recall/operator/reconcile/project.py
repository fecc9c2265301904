"""Batch status as a projection of its jobs, and the heals it implies. Pure.

The jobs are the ledger; `Batch.status` is derived from them (DESIGN §4) in a size that does not
grow with the Batch: counts, the indexes of transcribing, completed, failed and cancelled items
as compressed ranges (queued is the rest), and a bounded list of items that need attention.

`languages` counts completed items by the language transcribed (given, or detected; under
segment scope the one with the most speech): per language the larger of the stored count and
the count among the jobs present, so counts stay when the jobs go. Not guaranteed: a job
recreated after it completed, and detected in another language the second time, counts in both
(one deleted before it completed and recreated counts once).

`project` returns the status the Batch should have. An item whose job changed since the last
written projection (`changed`) is updated; any other item whose stored phase differs from its
job's is a *heal*: the projection was lost (a crash between two writes) or someone edited it.
An item without a job keeps what was stored until the reconciler creates the job. Conditions:
`conditions`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from recall.operator.reconcile.conditions import (
    conditions,
    fanned_out,
    model_conditions,
    storage_conditions,
)
from recall.operator.reconcile.record import JobRecord
from recall.resources import (
    ITEM_PHASE_OF_JOB,
    MAX_ATTENTION,
    Attention,
    Batch,
    BatchStatus,
    Counts,
    ItemPhase,
    Phase,
    indexes,
    set_condition,
)

# Failures that come from what a Batch's jobs share (the model, the language asked for): the
# Batch says so once, in its ModelFailing condition.
MODEL_REASONS = frozenset(
    {
        "ModelNotFound",
        "ModelCorrupt",
        "ModelInvalid",
        "ModelAccessDenied",
        "LanguageDetectionUnsupported",
        "UnsupportedLanguage",
        "TranslationUnsupported",
    }
)
# One byte per item: its phase, in this order (0 = queued, the default).
CODES = list(ItemPhase)
CODE = {p: i for i, p in enumerate(CODES)}
STORED_FIELDS = {
    ItemPhase.TRANSCRIBING: "transcribing_indexes",
    ItemPhase.COMPLETED: "completed_indexes",
    ItemPhase.FAILED: "failed_indexes",
    ItemPhase.CANCELLED: "cancelled_indexes",
}


@dataclass(frozen=True)
class Heal:
    """One item the projection found wrong: what the status said, and what its job says."""

    index: int
    key: str
    was: ItemPhase
    now: ItemPhase

    def describe(self) -> str:
        return f"item {self.key} said {self.was} but its job is {self.now}"


@dataclass(frozen=True)
class Projection:
    status: BatchStatus
    heals: list[Heal]


def stored_phases(stored: BatchStatus, total: int) -> bytearray:
    """One phase code per item, as the stored status says (items beyond it read queued)."""
    out = bytearray(total)
    for phase, name in STORED_FIELDS.items():
        code = bytes([CODE[phase]])
        for lo, hi in indexes.spans(getattr(stored, name)):
            hi = min(hi, total - 1)
            if lo <= hi:
                out[lo : hi + 1] = code * (hi - lo + 1)
    return out


def known_below(stored: BatchStatus, total: int) -> int:
    """How many leading items the stored status says the phase of: all, unless an encoding was
    cut (`indexesTruncated`); past the cut an item reads queued whatever it was."""
    if not stored.indexes_truncated:
        return total
    cuts = (indexes.whole_below(getattr(stored, name)) for name in STORED_FIELDS.values())
    return min([total, *(c for c in cuts if c is not None)])


def attention_of(
    total: int,
    key_of: Callable[[int], str],
    jobs: Mapping[int, JobRecord],
    phases: bytearray,
    missing: set[int],
) -> list[Attention]:
    """Failed items, then items without a job, then items that were retried: at most
    `MAX_ATTENTION`, by index within each group."""
    failed: list[Attention] = []
    retried: list[Attention] = []
    failed_code = CODE[ItemPhase.FAILED]
    notable = sorted(
        (i, r)
        for i, r in jobs.items()
        if i < total and (phases[i] == failed_code or r.expired_leases or r.failures)
    )
    for i, record in notable:
        phase = CODES[phases[i]]
        entry = Attention(
            index=i,
            key=key_of(i),
            phase=phase,
            job=record.name,
            attempts=record.attempts,
            expired_leases=record.expired_leases or None,
            reason=record.error_reason,
            message=(record.error_message or "")[:512] or None,
        )
        if phase is ItemPhase.FAILED and len(failed) < MAX_ATTENTION:
            failed.append(entry)
        elif (
            not phase.terminal
            and (record.expired_leases or record.failures)
            and len(retried) < MAX_ATTENTION
        ):
            retried.append(entry)
    gone = [
        Attention(index=i, key=key_of(i), phase=CODES[phases[i]], reason="JobMissing")
        for i in sorted(missing)[:MAX_ATTENTION]
        if i < total
    ]
    return (failed + gone + retried)[:MAX_ATTENTION]


def eta(counts: Counts, started: dt.datetime | None, now: dt.datetime) -> dt.datetime | None:
    """Now plus the remaining items at the throughput observed since the first claim."""
    remaining = counts.total - counts.done
    if remaining <= 0 or started is None or counts.done == 0:
        return None
    elapsed = (now - started).total_seconds()
    if elapsed <= 0:
        return None
    seconds = remaining * elapsed / counts.done
    return (now + dt.timedelta(seconds=seconds)).replace(microsecond=0)


@dataclass
class Tally:
    """What one pass over the jobs finds: each item's phase, the heals, the sums and times."""

    phases: bytearray
    heals: list[Heal]
    published: int = 0
    storage: tuple[str, str] | None = None  # a job failed because the results store refused
    model: tuple[str, str] | None = None  # a job failed for its model or language (shared)
    expired: int = 0
    failures: int = 0
    first_start: dt.datetime | None = None
    last_end: dt.datetime | None = None


def tally(
    before: bytearray,
    key_of: Callable[[int], str],
    jobs: Mapping[int, JobRecord],
    changed: frozenset[int],
    judge: bool,
    known: int,
) -> Tally:
    """One pass over the jobs: their items' phases, and (when `judge`) the items below `known`
    whose stored phase differs although their job did not change since the last projection:
    heals."""
    t = Tally(bytearray(before), [])
    # A completed item whose job is gone (its Batch's TTL, or a user) has nothing left to
    # publish: it counts as published, so a Batch never waits for a job that cannot come back.
    t.published = sum(
        1 for i, code in enumerate(before) if code == CODE[ItemPhase.COMPLETED] and i not in jobs
    )
    for i, record in jobs.items():
        if i >= len(before):
            continue
        code = CODE[ITEM_PHASE_OF_JOB[record.phase]]
        if judge and code != before[i] and i not in changed and i < known:
            t.heals.append(Heal(i, key_of(i), CODES[before[i]], CODES[code]))
        t.phases[i] = code
        if record.phase is Phase.SUCCEEDED and record.published:
            t.published += 1
        reason = record.error_reason or ""
        if record.phase is Phase.FAILED and reason.startswith("Storage") and t.storage is None:
            t.storage = (reason, record.error_message or reason)
        if record.phase is Phase.FAILED and reason in MODEL_REASONS and t.model is None:
            t.model = (reason, record.error_message or reason)
        t.expired += record.expired_leases
        t.failures += record.failures
        if record.started_at and (t.first_start is None or record.started_at < t.first_start):
            t.first_start = record.started_at
        if record.completed_at and (t.last_end is None or record.completed_at > t.last_end):
            t.last_end = record.completed_at
    t.heals.sort(key=lambda h: h.index)
    return t


def languages_of(
    stored: dict[str, int] | None, jobs: Mapping[int, JobRecord], total: int
) -> dict[str, int] | None:
    """Completed items per language (see the module contract), by language code."""
    out = dict(stored or {})
    present: dict[str, int] = {}
    for i, record in jobs.items():
        if i < total and record.phase is Phase.SUCCEEDED and record.language:
            present[record.language] = present.get(record.language, 0) + 1
    for language, n in present.items():
        out[language] = max(out.get(language, 0), n)
    return dict(sorted(out.items())) or None


def encoded(phases: bytearray) -> tuple[dict[str, str | None], bool]:
    """The *Indexes fields of `phases`, and whether any was cut short."""
    runs = {name: indexes.encode_runs(phases, CODE[p]) for p, name in STORED_FIELDS.items()}
    fields = {name: text or None for name, (text, _) in runs.items()}
    return fields, any(cut for _, cut in runs.values())


def project(
    batch: Batch,
    total: int,
    key_of: Callable[[int], str],
    jobs: Mapping[int, JobRecord],
    stored: BatchStatus,
    now: dt.datetime,
    changed: frozenset[int],
    *,
    recreated: int = 0,
    invalid: str | None = None,
    storage: tuple[str, str] | None = None,
) -> Projection:
    """The Batch status derived from `jobs` (by item index), and the heals it implies.

    `stored`: the status as last written; `changed`: items whose jobs changed since; `recreated`:
    jobs the reconciler created again (heals too); `invalid`: why the items cannot be used;
    `storage`: the results store's last refusal of a publish of this Batch. Before the first
    projection nothing is a heal. Complete once every item is final and every completed item's
    result is published."""
    before = stored_phases(stored, total)
    t = tally(before, key_of, jobs, changed, stored.counts is not None, known_below(stored, total))
    p = t.phases
    by_phase = {q.value: p.count(CODE[q]) for q in ItemPhase}
    counts = Counts(total=total, published=t.published, **by_phase)
    fields, truncated = encoded(p)
    missing = set(range(total)) - jobs.keys() if fanned_out(stored) else set()
    started = stored.started_at or t.first_start
    final = total > 0 and counts.done == total and invalid is None
    finished = final and counts.published >= counts.completed
    conds = conditions(stored.conditions, batch, counts, final, invalid, now)
    conds = storage_conditions(conds, counts, t.storage or storage, now)
    conds = model_conditions(conds, t.model, now)
    if total > 0 and not fanned_out(stored) and len(jobs.keys() & set(range(total))) == total:
        text = f"one TranscriptionJob per item ({total})"
        conds = set_condition(conds, "JobsCreated", "True", "FannedOut", text, now)
    status = BatchStatus(
        observed_generation=batch.metadata.generation,
        counts=counts,
        **fields,
        indexes_truncated=truncated or None,
        attention=attention_of(total, key_of, jobs, p, missing),
        progress=f"{100 * counts.done // max(1, total)}%",
        eta=None if finished else eta(counts, started, now),
        started_at=started,
        completed_at=(stored.completed_at or t.last_end or now) if finished else None,
        expired_leases=t.expired,
        failures=t.failures,
        heals=(stored.heals or 0) + len(t.heals) + recreated,
        languages=languages_of(stored.languages, jobs, total),
        notified=stored.notified,  # the notifier's record (recall.operator.notify)
        conditions=conds,
    )
    return Projection(status, t.heals)
