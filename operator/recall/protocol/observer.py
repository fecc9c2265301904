"""Lease observations: when the operator first saw each lease's current renewal, on its own
monotonic clock. The one place that observes leases.

As client-go's leader election does with `observedTime` (DESIGN §3), a lease is expired once
`durationSeconds` passed on the observer's clock since it first saw the lease's current (token,
renewTime). A worker's timestamps are compared only for equality, so clock skew between
machines cannot cause or prevent a reclaim. After a restart every lease counts from when it is
first observed: a restart can delay a reclaim, never hasten it.

`LeaseObserver.observe` is the only mutation; `Observation.expired` and `next_expiry` are pure.
"""

from __future__ import annotations

import datetime as dt
import threading
from dataclasses import dataclass

from recall.resources import Lease

JobKey = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True)
class Observation:
    """What the observer saw of one lease, and when, on its own monotonic clock."""

    token: str
    renew_time: dt.datetime
    duration_seconds: int
    observed_at: float

    def expires_at(self) -> float:
        return self.observed_at + self.duration_seconds

    def expired(self, now_mono: float) -> bool:
        return now_mono >= self.expires_at()

    def matches(self, lease: Lease) -> bool:
        """True when `lease` is still the one observed: same token, no renewal since."""
        return (
            lease.token == self.token
            and lease.renew_time == self.renew_time
            and lease.duration_seconds == self.duration_seconds
        )


class LeaseObserver:
    """The observation table: one `Observation` per leased job. Thread-safe."""

    def __init__(self) -> None:
        self._seen: dict[JobKey, Observation] = {}
        self._lock = threading.Lock()

    def observe(self, key: JobKey, lease: Lease | None, now_mono: float) -> Observation | None:
        """Record the job's lease as seen at `now_mono`; returns its observation (None when the
        job holds no lease). The clock of a lease restarts only when it changes."""
        with self._lock:
            if lease is None:
                self._seen.pop(key, None)
                return None
            current = self._seen.get(key)
            if current is None or not current.matches(lease):
                current = Observation(
                    token=lease.token,
                    renew_time=lease.renew_time,
                    duration_seconds=lease.duration_seconds,
                    observed_at=now_mono,
                )
                self._seen[key] = current
            return current

    def forget(self, key: JobKey) -> None:
        with self._lock:
            self._seen.pop(key, None)

    def snapshot(self) -> dict[JobKey, Observation]:
        with self._lock:
            return dict(self._seen)


def next_expiry(
    observations: dict[JobKey, Observation], after: float = float("-inf")
) -> float | None:
    """The monotonic time of the earliest expiry later than `after`, or None."""
    return min((e for o in observations.values() if (e := o.expires_at()) > after), default=None)
