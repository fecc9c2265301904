"""The numbers of a run, for its line: jobs by phase, faults by kind, the longest kill ->
Queued delays, how long the bucket took to settle after the drain, and other counts.
Measured, not asserted."""

from __future__ import annotations

from collections import Counter

from recall_dev.chaos.fleet import CRASH_POINT, KILLED
from recall_dev.chaos.history import History
from recall_dev.chaos.invariants.verdict import Verdict


def count(h: History, verdict: Verdict) -> None:
    """Into `verdict.stats`, after every check (the kill samples come from them)."""
    s = verdict.stats
    phases = Counter(
        (j["status"].get("phase") or "Queued") for n, j in h.final.jobs.items() if n in h.expected
    )
    s["jobs"] = len(h.expected)
    s["phases"] = dict(phases)
    s["max_attempts"] = max(
        (int(j["status"].get("attempts") or 0) for j in h.final.jobs.values()), default=0
    )
    # a worker-crash or operator-crash record is the run noticing a crash point, already
    # counted as one
    faults = Counter(f.kind for f in h.faults if f.kind not in ("worker-crash", "operator-crash"))
    faults += Counter(f.kind for f in h.self_faults)
    s["faults"] = dict(faults)
    up = [k for k in verdict.kills if k.delay is not None and k.recovered is None]
    down = [k for k in verdict.kills if k.delay is not None and k.recovered is not None]
    s["kill_samples"] = len(up)
    s["max_kill_to_queued"] = max(up, key=lambda k: k.delay or 0.0, default=None)
    s["kill_samples_disrupted"] = len(down)
    s["max_kill_to_queued_disrupted"] = max((k.delay or 0.0 for k in down), default=None)
    s["settle_seconds"] = None if h.settled is None or h.drained is None else h.settled - h.drained
    s["published"] = sum(1 for j in h.final.jobs.values() if j["status"].get("published"))
    s["tick_errors"] = len(h.events("tick_failed"))
    s["relists"] = len(h.relists)
    s["drain_seconds"] = None if h.drained is None else h.drained - h.faults_ended
    s["self_ends"] = Counter(p.reason for p in h.processes if p.reason in (KILLED, CRASH_POINT))
