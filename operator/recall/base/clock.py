"""The clocks: one monotonic clock that decides time, and the wall clock for timestamps.

`boottime` is CLOCK_BOOTTIME: monotonic, and it keeps counting while the machine is suspended,
so a renew deadline or an observed expiry measured on it never shrinks across a suspend. Every
duration the protocol judges (renew deadlines, lease expiry, backoff, leader election) is
measured on an injected `Monotonic`, `boottime` by default, so tests can drive time by hand.
`utcnow` is for timestamps that are recorded, never compared across machines.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable

Monotonic = Callable[[], float]
WallClock = Callable[[], dt.datetime]


def boottime() -> float:
    """Seconds on CLOCK_BOOTTIME: monotonic, and counting while the machine is suspended."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def micro(now: dt.datetime) -> str:
    """`now` as a Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
