"""Invariants 1 (one valid lease at a time) and 2 (no accepted write from a non-holder), on
each job's versions as the recorder saw them, and on the outcomes of the run's stale writes.
A finished job never changes, but for the one write a Succeeded job takes: the operator's
publish record (`status.published`), added once, nothing else changed with it."""

from __future__ import annotations

import json
from collections import Counter

from recall.resources import Phase
from recall_dev.chaos.history import History, JobHistory, Version
from recall_dev.chaos.invariants.verdict import CARELESS, FORGED, PROBE, TERMINAL, Verdict, show


def check_leases(h: History, job: JobHistory, verdict: Verdict) -> None:
    """1 and 2 on one job: each version, the token runs of its fences, each pair of
    consecutive versions, its result, and no stale write applied."""
    s = h.started
    runs = _versions(job, verdict, s)
    _runs(job, runs, verdict, s)
    for p, v in job.consecutive():
        _transition(job, p, v, verdict, s)
    results = [v for v in job.versions if v.result is not None]
    for v in results[1:]:
        if v.result != results[0].result:
            verdict.add(2, job.name, "an accepted result changed", show(results[0], s), show(v, s))
            break
    for v in job.versions:
        forged = str((v.result or {}).get("transcript", "")).startswith(FORGED)
        if PROBE in (v.fence or "") or forged or (v.lease or {}).get("holder") == CARELESS:
            verdict.add(
                2, job.name, "a stale write without resourceVersion was applied", show(v, s)
            )


def _versions(job: JobHistory, verdict: Verdict, s: float) -> list[tuple[str, Version]]:
    """Each version: a lease exactly while Leased, its fence presenting its token; a new token
    only with a new attempt; a lease never changed in place. Returns the token runs of the
    fences: (token, its first version) each time the fence's token changes."""
    seen: dict[str, Version] = {}
    last_attempt = 0
    runs: list[tuple[str, Version]] = []
    for v in job.versions:
        if (v.phase == Phase.LEASED) != (v.lease is not None):
            verdict.add(
                1, job.name, "a lease exists outside Leased (or Leased without one)", show(v, s)
            )
        if v.lease is not None and v.fence_token != v.token:
            verdict.add(
                2, job.name, "a leased version whose fence does not present its token", show(v, s)
            )
        if v.fence_token and (not runs or runs[-1][0] != v.fence_token):
            runs.append((v.fence_token, v))
        token = v.token
        if token is None or v.lease is None:
            continue
        first = seen.get(token)
        if first is None:
            if v.attempts <= last_attempt:
                verdict.add(1, job.name, "a new lease without a new attempt", show(v, s))
            last_attempt = max(last_attempt, v.attempts)
            seen[token] = v
        elif first.lease is not None and (
            first.attempts != v.attempts
            or first.lease["holder"] != v.lease["holder"]
            or first.lease["acquireTime"] != v.lease["acquireTime"]
        ):
            verdict.add(1, job.name, "a lease changed in place", show(first, s), show(v, s))
    return runs


def _runs(job: JobHistory, runs: list[tuple[str, Version]], verdict: Verdict, s: float) -> None:
    """A token, once another has written, never writes again."""
    counts = Counter(token for token, _ in runs)
    for token, n in counts.items():
        if n > 1:
            around = [show(v, s) for t, v in runs if t == token][:4]
            verdict.add(
                1, job.name, f"token {token[:8]} wrote again after another lease's writes", *around
            )


def _transition(job: JobHistory, p: Version, v: Version, verdict: Verdict, s: float) -> None:
    """From version `p` to the next, `v`: a write to a leased job presents its token, a claim
    is one new attempt, a finished job does not change, and Succeeded is reached only from
    Leased, with the holder's result."""
    if p.lease is not None and v.status != p.status and v.fence_token != p.token:
        verdict.add(
            2, job.name, "a write to a leased job without its token", show(p, s), show(v, s)
        )
    if (
        p.lease is None
        and v.lease is not None
        and (v.attempts != p.attempts + 1 or v.fence != f"{v.token}/1")
    ):
        verdict.add(1, job.name, "a claim that is not one new attempt", show(p, s), show(v, s))
    if p.phase in TERMINAL and v.status != p.status and not _published(p, v):
        verdict.add(2, job.name, "a finished job changed", show(p, s), show(v, s))
    if v.phase == Phase.SUCCEEDED and p.phase != Phase.SUCCEEDED:
        r = v.result or {}
        if p.lease is None:
            verdict.add(2, job.name, "Succeeded not reached from Leased", show(p, s), show(v, s))
        elif (r.get("token"), r.get("attempt"), r.get("worker")) != (
            p.token,
            p.attempts,
            p.lease["holder"],
        ):
            verdict.add(2, job.name, "the result is not the holder's", show(p, s), show(v, s))


def _published(p: Version, v: Version) -> bool:
    """`v` is `p`, a Succeeded job not published yet, with the publish record and nothing else
    changed: the one write a finished job takes (DESIGN §4b)."""
    if p.phase != Phase.SUCCEEDED or "published" in p.status or "published" not in v.status:
        return False
    return {k: x for k, x in v.status.items() if k != "published"} == p.status


def check_probes(h: History, verdict: Verdict) -> None:
    """2: every stale write the run sent was refused."""
    for f in h.faults:
        if f.kind == "stale-write" and f.detail.get("outcome") == "accepted":
            verdict.add(
                2,
                f.target,
                "a write with a stale token and no resourceVersion was accepted",
                json.dumps(f.detail)[:400],
            )
