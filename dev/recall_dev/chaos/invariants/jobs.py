"""Invariants 3 (no job lost: every submitted job ended by the end of the drain) and 7 (attempts
bounded and each counted once; poison and permanently failing jobs end Failed)."""

from __future__ import annotations

from recall.resources import Phase
from recall_dev.chaos.history import History, JobHistory
from recall_dev.chaos.invariants.verdict import TERMINAL, Verdict, show
from recall_dev.chaos.workload import PERMANENT, POISON


def check_lost(h: History, verdict: Verdict) -> None:
    lost = 0
    for name in sorted(h.expected):
        final = h.final.jobs.get(name)
        if final is None:
            lost += 1
            verdict.add(3, name, "the job does not exist at the end")
            continue
        phase = final["status"].get("phase") or "Queued"
        if phase not in TERMINAL:
            lost += 1
            job = h.jobs.get(name)
            tail = [show(v, h.started) for v in (job.versions[-3:] if job else [])]
            verdict.add(3, name, f"still {phase} at the end of the drain", *tail)
    verdict.stats["lost"] = lost


def check_attempts(h: History, job: JobHistory, verdict: Verdict) -> None:
    """7 on every version of `job` (the first violation only), then on how it ended."""
    for v in job.versions:
        spec = v.spec
        releases = v.counter("releases")
        budget = int(spec.get("maxAttempts", 5)) + min(releases, int(spec.get("maxReleases", 10)))
        if v.attempts > budget:
            verdict.add(
                7, job.name, f"attempts {v.attempts} over the budget {budget}", show(v, h.started)
            )
            break
        ended = v.counter("expiredLeases") + releases + v.counter("failures")
        open_ = 1 if v.phase in (Phase.LEASED, Phase.SUCCEEDED) else 0
        if v.attempts != ended + open_:
            verdict.add(
                7,
                job.name,
                "an attempt was not counted exactly once when it ended",
                show(v, h.started),
            )
            break
    _ended_by_kind(h, job, verdict)


def _ended_by_kind(h: History, job: JobHistory, verdict: Verdict) -> None:
    """A poison job ends Failed with its reason; a permanently failing job does not succeed."""
    kind = h.expected.get(job.name)
    final = h.final.jobs.get(job.name)
    if final is None:
        return
    status = final["status"]
    if kind == POISON and status.get("phase") == Phase.SUCCEEDED:
        verdict.add(7, job.name, "a poison job succeeded")
    if kind == POISON and status.get("phase") == Phase.FAILED:
        reason = (status.get("lastError") or {}).get("reason")
        if reason not in ("SimulatedFailure", "LeaseExpired"):
            verdict.add(7, job.name, f"a poison job failed without its reason: {reason}")
    if kind == PERMANENT and status.get("phase") == Phase.SUCCEEDED:
        verdict.add(7, job.name, "a permanently failing job succeeded")
