"""Invariant 6 (Batch items converge: at the end every item shows its job's phase, and no Batch
version moves an item back out of a final phase), and how far Batch items lag their jobs while
the operator is up (measured, not asserted)."""

from __future__ import annotations

import bisect
from typing import Any

from recall.operator.reconcile.fanout import job_name
from recall.operator.reconcile.project import CODES, stored_phases
from recall.resources import ITEM_PHASE_OF_JOB, BatchStatus, Phase
from recall_dev.chaos.history import History, JobHistory, Version
from recall_dev.chaos.invariants.reclaims import disruptions
from recall_dev.chaos.invariants.verdict import Verdict


def check_items(h: History, verdict: Verdict) -> None:
    """6 at the end (only after a finished drain: before, items may lag jobs that just changed)
    and on every Batch version."""
    bad = 0
    for b in h.final.batches:
        name = b["metadata"]["name"]
        items = (b.get("spec") or {}).get("items") or []
        _no_way_back(h, name, items, verdict)
        if h.drained is None:
            continue
        status = BatchStatus.model_validate(b.get("status") or {})
        codes = stored_phases(status, len(items))
        wrong = []
        for i, item in enumerate(items):
            job = h.final.jobs.get(job_name(name, item["key"]))
            want = ITEM_PHASE_OF_JOB[Phase(job["status"].get("phase") or "Queued")] if job else None
            if status.counts is None or CODES[codes[i]] != want:
                wrong.append(f"{item['key']}: item {CODES[codes[i]]}, job {want}")
        if wrong:
            bad += len(wrong)
            verdict.add(6, name, f"{len(wrong)} item(s) differ from their jobs", *wrong[:10])
    verdict.stats["unconverged"] = bad if h.drained is not None else None
    if h.converged is not None and h.drained is not None:
        verdict.stats["converge_seconds"] = h.converged - h.drained


def _no_way_back(h: History, batch: str, items: list[Any], verdict: Verdict) -> None:
    """A job never leaves Succeeded, Failed or Cancelled (and none is deleted here), so once
    a Batch version shows an item completed, failed or cancelled, no later one may show it in
    another phase: that would be the Batch lying."""
    recorded = h.batches.get(batch)
    if recorded is None:
        return
    final: dict[int, tuple[Any, Version]] = {}
    reported: set[int] = set()
    for v in recorded.versions:
        if v.status.get("counts") is None:
            continue
        codes = stored_phases(BatchStatus.model_validate(v.status), len(items))
        for i in range(len(items)):
            phase = CODES[codes[i]]
            was = final.get(i)
            if was is None:
                if phase.terminal:
                    final[i] = (phase, v)
            elif phase != was[0] and i not in reported:
                reported.add(i)
                verdict.add(
                    6,
                    batch,
                    f"item {items[i]['key']} moved back from {was[0]} to {phase}",
                    f"Batch rv={was[1].rv} seen=+{was[1].t - h.started:.2f}s: {was[0]}",
                    f"Batch rv={v.rv} seen=+{v.t - h.started:.2f}s: {phase}",
                )


# The Batch versions the recorder saw with item phases: (seen, the phase code of each item).
Shown = list[tuple[float, Any]]


def measure_item_lags(h: History, verdict: Verdict) -> None:
    """For every change of a Batch job's phase while the operator was up: the time until a
    Batch version the recorder saw shows the item in that phase (changes overtaken by the next
    one before they were shown are left out)."""
    down = disruptions(h)
    lags: list[float] = []
    for b in h.final.batches:
        name = b["metadata"]["name"]
        items = (b.get("spec") or {}).get("items") or []
        recorded = h.batches.get(name)
        if recorded is None:
            continue
        shown = [
            (v.t, stored_phases(BatchStatus.model_validate(v.status), len(items)))
            for v in recorded.versions
            if v.status.get("counts") is not None
        ]
        for i, item in enumerate(items):
            job = h.jobs.get(job_name(name, item["key"]))
            if job is not None:
                lags.extend(_item_lags(job, i, shown, down))
    lags.sort()
    verdict.stats["item_lag_samples"] = len(lags)
    verdict.stats["item_lag_max"] = lags[-1] if lags else None
    verdict.stats["item_lag_p99"] = lags[int(0.99 * (len(lags) - 1))] if lags else None


def _item_lags(
    job: JobHistory, i: int, shown: Shown, down: list[tuple[float, float]]
) -> list[float]:
    """The lags of item `i` (its job `job`) behind each change of its job's phase."""
    times = [t for t, _ in shown]
    changes: list[tuple[float, Any]] = []
    for v in job.versions:
        phase = ITEM_PHASE_OF_JOB[Phase(v.phase)]
        if not changes or changes[-1][1] != phase:
            changes.append((v.t, phase))
    lags = []
    for k, (t, phase) in enumerate(changes):
        until = changes[k + 1][0] if k + 1 < len(changes) else float("inf")
        # the two watches may deliver a few ms apart
        start = bisect.bisect_left(times, t - 0.05)
        seen = next((tb for tb, codes in shown[start:] if CODES[codes[i]] == phase), None)
        if seen is None or seen > until:
            continue
        if any(a <= seen and e >= t for a, e in down):
            continue
        lags.append(max(0.0, seen - t))
    return lags
