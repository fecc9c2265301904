"""Invariants 3 (no job lost: every submitted job ended by the end of the drain) and 7 (attempts
bounded and each counted once; poison and permanently failing jobs end Failed).

When the drain ran out of time (`History.drained` is None), the jobs it left are not counted as
lost: the verdict says the drain timed out (`DrainTimeout`), with the jobs not ended at its
deadline and how each looks at the end."""

from __future__ import annotations

from recall.resources import Phase
from recall_dev.chaos.history import History, JobHistory
from recall_dev.chaos.invariants.verdict import TERMINAL, DrainTimeout, Verdict, show
from recall_dev.chaos.workload import PERMANENT, POISON


def check_lost(h: History, verdict: Verdict) -> None:
    if h.drained is None:
        _drain_timed_out(h, verdict)
        return
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


def _drain_timed_out(h: History, verdict: Verdict) -> None:
    """The jobs not ended at the drain's deadline (or, in older records, at the end)."""
    names = h.not_ended or [
        n
        for n in sorted(h.expected)
        if (h.final.jobs.get(n) or {}).get("status", {}).get("phase") not in TERMINAL
    ]
    evidence = []
    for name in names[:10]:
        final = h.final.jobs.get(name)
        if final is None:
            evidence.append(f"{name}: does not exist at the end")
            continue
        job = h.jobs.get(name)
        last = show(job.versions[-1], h.started) if job and job.versions else "never seen"
        evidence.append(f"{name}: {final['status'].get('phase') or 'Queued'} at the end; {last}")
    if len(names) > 10:
        evidence.append(f"... and {len(names) - 10} more")
    verdict.drain = DrainTimeout(tuple(names), tuple(evidence))
    verdict.stats["lost"] = None


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
