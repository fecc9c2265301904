"""The reaper: reclaim leases whose holder stopped renewing.

Expiry is judged on the reaper's own monotonic clock (DESIGN §3, as client-go's leader
election does with `observedTime`): `LeaseClock.observe(job, now)` records when a lease's
(token, renewTime) pair was first seen; the lease is expired once `durationSeconds` passed on
this clock since then. A worker's timestamps are only compared for equality, never with our
clock, so clock skew between nodes cannot cause or prevent a reclaim. After a restart every
lease counts from when it is first observed, which can only delay a reclaim, never hasten it.

`decide(clock, jobs, now)` is pure; `reclaim_job()` applies one decision with a fenced write
(which refuses if a renewal landed since the observation); `Reaper.run_once()` does both and
returns what it did.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from recall import lease, log, metrics
from recall.kube import Kube, Refused, Written, fenced_write
from recall.lease import Observation
from recall.models import Phase, TranscriptionJob

_log = log.get("reaper")

JobKey = tuple[str, str]  # (namespace, name)


def key_of(job: TranscriptionJob) -> JobKey:
    return (job.namespace, job.name)


@dataclass
class LeaseClock:
    """When each lease's current (token, renewTime) was first observed, on our monotonic clock."""

    seen: dict[JobKey, Observation] = field(default_factory=dict)

    def observe(self, job: TranscriptionJob, now_monotonic: float) -> Observation | None:
        """Record `job`'s lease; returns its observation, or None when it holds no lease."""
        key = key_of(job)
        status = job.status
        if status.effective_phase is not Phase.LEASED or status.lease is None:
            self.seen.pop(key, None)
            return None
        current = self.seen.get(key)
        lease_ = status.lease
        if (
            current is None
            or current.token != lease_.token
            or current.renew_time != lease_.renew_time
            or current.duration_seconds != lease_.duration_seconds
        ):
            current = Observation(
                token=lease_.token,
                renew_time=lease_.renew_time,
                duration_seconds=lease_.duration_seconds,
                observed_at=now_monotonic,
            )
            self.seen[key] = current
        return current

    def forget(self, key: JobKey) -> None:
        self.seen.pop(key, None)


@dataclass(frozen=True)
class ReclaimDecision:
    job: TranscriptionJob
    observation: Observation
    overdue: float  # seconds past expiry at decision time


def decide(
    clock: LeaseClock, jobs: Iterable[TranscriptionJob], now_monotonic: float
) -> list[ReclaimDecision]:
    """Observe every job and return those whose lease expired on our clock."""
    out = []
    for job in jobs:
        observation = clock.observe(job, now_monotonic)
        if observation is not None and observation.expired(now_monotonic):
            out.append(ReclaimDecision(job, observation, -observation.expires_in(now_monotonic)))
    return out


@dataclass(frozen=True)
class ReclaimOutcome:
    job: TranscriptionJob  # as written (Written) or as last read (refused)
    reclaimed: bool
    reason: str  # "Queued", "Failed", or the refusal reason


def reclaim_job(
    kube: Kube, decision: ReclaimDecision, *, now: dt.datetime, now_monotonic: float
) -> ReclaimOutcome:
    """Apply one reclaim with a fenced write. A renewal that landed first wins (refusal)."""
    job = decision.job
    result = fenced_write(
        kube,
        job.namespace,
        job.name,
        lambda j: lease.reclaim(
            j.status, now, now_monotonic, decision.observation, max_attempts=j.spec.max_attempts
        ),
        known=job,
        action="reclaim",
    )
    if isinstance(result, Refused):
        _log.info(
            "reclaim_refused", job=job.name, namespace=job.namespace, reason=result.refusal.reason
        )
        return ReclaimOutcome(result.job or job, False, result.refusal.reason)
    assert isinstance(result, Written)
    written = result.job
    metrics.RECLAIMS.inc()
    obs = decision.observation
    metrics.RECLAIM_DELAY.observe(
        max(0.0, time.monotonic() - obs.observed_at - obs.duration_seconds)
    )
    phase = written.status.effective_phase
    _log.info(
        "reclaimed",
        job=job.name,
        namespace=job.namespace,
        holder=decision.job.status.lease.holder if decision.job.status.lease else None,
        attempt=written.status.attempts,
        expired_leases=written.status.expired_leases,
        phase=phase,
        overdue_seconds=round(decision.overdue, 3),
    )
    return ReclaimOutcome(written, True, phase)


class Reaper:
    """A standalone reaper over one namespace (or all): list leased jobs, reclaim the expired.

    The operator drives the same `LeaseClock`, `decide` and `reclaim_job` from kopf's watch
    instead of listing; this class serves tests and tools that run without the operator.
    """

    def __init__(self, kube: Kube, namespace: str | None, clock: LeaseClock | None = None) -> None:
        self.kube = kube
        self.namespace = namespace
        self.clock = clock or LeaseClock()

    def run_once(
        self, now: dt.datetime | None = None, now_monotonic: float | None = None
    ) -> list[ReclaimOutcome]:
        """One scan; returns the reclaims it attempted (written or refused)."""
        mono = time.monotonic() if now_monotonic is None else now_monotonic
        jobs, _ = self.kube.list_jobs(self.namespace, field_selector="status.phase=Leased")
        live = {key_of(j) for j in jobs}
        for key in list(self.clock.seen):
            if key not in live:
                self.clock.forget(key)
        stamp = now or dt.datetime.now(dt.UTC)
        return [
            reclaim_job(self.kube, d, now=stamp, now_monotonic=mono)
            for d in decide(self.clock, jobs, mono)
        ]
