"""Invariant 5 (a renewed lease is never reclaimed) and the reclaim delay, reported as 12 (not a
number of DESIGN §5, whose 10 and 11 the chaos run does not measure this way): a worker killed
while it held a lease, its job Queued again within `lease + 2 ticks` of the kill, or of the
operator and control plane coming back when they were down meanwhile."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from recall_dev.chaos.history import Fault, History, JobHistory, Version, epoch
from recall_dev.chaos.invariants.verdict import RECLAIM_DELAY, KillSample, Verdict, show


def check_reclaims(h: History, verdict: Verdict) -> None:
    """5 on every reclaim whose lease's last renewal was seen; the margins go to the stats."""
    margins: list[float] = []
    unverified = 0
    for job in h.jobs.values():
        for p, v in _reclaims(job):
            if p is None or p.lease is None:
                unverified += 1
                continue
            renewed = epoch(p.lease["renewTime"]) or 0.0
            margin = v.t - renewed - float(p.lease["durationSeconds"])
            margins.append(margin)
            if margin < 0:
                _renewed_reclaimed(h, job, p, v, renewed, verdict)
    verdict.stats["reclaims"] = len(margins) + unverified
    verdict.stats["reclaim_margin_min"] = min(margins) if margins else None
    verdict.stats["reclaims_unverified"] = unverified


def _reclaims(job: JobHistory) -> Iterator[tuple[Version | None, Version]]:
    """Each reclaim of `job` (the first version with a fence `<token>/reclaim-<n>`), with the
    last version seen of the lease it reclaimed (None if none was seen)."""
    last_of: dict[str, Version] = {}
    fence = None
    for v in job.versions:
        if v.token:
            last_of[v.token] = v
        if v.fence and v.fence != fence and "/reclaim-" in v.fence:
            yield last_of.get(v.fence_token or ""), v
        fence = v.fence


def _renewed_reclaimed(
    h: History, job: JobHistory, p: Version, v: Version, renewed: float, verdict: Verdict
) -> None:
    assert p.lease is not None
    holder = p.lease["holder"]
    logs = [
        f"+{e.t - h.started:.2f}s {e.process} {e.event}"
        for e in h.logs
        if e.process == holder and e.get("job") == job.name
    ][-6:]
    verdict.add(
        5,
        job.name,
        f"reclaimed {v.t - renewed:.2f} s after a renewal of a "
        f"{p.lease['durationSeconds']} s lease",
        show(p, h.started),
        show(v, h.started),
        *logs,
    )


OPERATOR_DOWN = ("operator-kill", "operator-stop", "operator-crash")


def disruptions(h: History) -> list[tuple[float, float]]:
    """When no operator could reclaim: a leading operator killed, stopped or crashed at a
    fault point (until a leader is elected again, or it is continued), the API server or etcd
    restarting (until ready)."""
    out: list[tuple[float, float]] = []
    elected = sorted(e.t for e in h.events("leader_elected"))
    for f in h.faults:
        if f.kind == "control-plane-restart":
            out.append((f.t, float(f.detail.get("ready") or h.faults_ended)))
        elif f.kind in OPERATOR_DOWN and f.detail.get("leader"):
            ends = [t for t in elected if t > f.t]
            if f.kind == "operator-stop" and f.detail.get("continued"):
                ends.append(float(f.detail["continued"]))
            out.append((f.t, min(ends) if ends else h.faults_ended))
    return out


def check_kills(h: History, verdict: Verdict) -> None:
    """10 on every lease a killed (or crashed) worker held; each is a kill sample."""
    down = disruptions(h)
    two_ticks = 2 * h.tick + h.slack
    for f in h.faults:
        if f.kind not in ("worker-kill", "worker-crash"):
            continue
        for held in f.detail.get("leases", []):
            job = h.jobs.get(held["job"])
            if job is None:
                continue
            sample = _kill_sample(f, held, job, down, two_ticks)
            verdict.kills.append(sample)
            if sample.delay is None:
                continue
            if sample.delay > sample.bound:
                verdict.add(
                    RECLAIM_DELAY,
                    sample.job,
                    f"Queued {sample.delay:.2f} s after {sample.worker} was killed "
                    f"(bound {sample.bound:.2f} s, lease {sample.lease:g} s"
                    + (
                        f", back up +{sample.recovered - sample.t:.2f} s)"
                        if sample.recovered
                        else ")"
                    ),
                    *[show(v, h.started) for v in job.versions if v.t >= f.t - 3][:6],
                )


def _kill_sample(
    f: Fault, held: dict[str, Any], job: JobHistory, down: list[tuple[float, float]], ticks: float
) -> KillSample:
    token = held["token"]
    lease = float(held["duration"])
    holding = [i for i, v in enumerate(job.versions) if v.token == token]
    delay, ended_by = None, "still leased"
    if holding and holding[-1] + 1 < len(job.versions):
        after = job.versions[holding[-1] + 1]
        if after.fence == f"{token}/reclaim-{job.versions[holding[-1]].attempts}":
            delay, ended_by = after.t - f.t, "reclaim"
        else:
            ended_by = "its holder" if after.fence_token == token else "unknown"
    # While the leading operator or the control plane is down, nobody can reclaim; once back,
    # a correct operator reclaims within a lease and two ticks of its first observation. So
    # each disruption that begins before the expected reclaim moves it to its end + lease +
    # 2 ticks (disruptions over before the kill do not matter: the acting operator then saw
    # the lease by the kill at the latest).
    expected = f.t + lease + ticks
    recovered = None
    for start, end in sorted(down):
        if start <= expected and end >= f.t:
            expected = max(expected, end + lease + ticks)
            recovered = max(recovered or 0.0, end)
    bound = expected - f.t
    return KillSample(f.t, str(f.target), job.name, lease, delay, ended_by, recovered, bound)
