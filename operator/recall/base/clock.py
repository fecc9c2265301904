"""The clock: every time the runtime reads, waits for or sleeps through goes through a `Clock`.

As client-go's `clock.Clock`: handed to everything that waits, so a test drives time with one
`FakeClock` (`recall_dev.twin.clock`) instead of sleeping. `monotonic` is CLOCK_BOOTTIME: it
never goes back and keeps counting through a suspend, so a renew deadline or an observed expiry
never shrinks across one. Every duration the protocol judges (renew deadlines, lease expiry,
backoff, leader election, offers, probes) is measured on it. `now` is for recorded timestamps
(status times, Events), never compared across machines.

Outside the clock: log timestamps, kopf's internals, and the engines' timing of their own work
(reported, never decided on).
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Protocol


class Clock(Protocol):
    """What the runtime knows of time. Thread-safe."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (CLOCK_BOOTTIME on the system clock)."""
        ...

    def now(self) -> dt.datetime:
        """The wall clock, UTC, for timestamps that are recorded."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block for `seconds`."""
        ...

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        """Block until `event` is set (True) or `timeout` seconds passed (False); no timeout
        waits for the event alone."""
        ...


class SystemClock:
    """The machine's clocks."""

    def monotonic(self) -> float:
        return time.clock_gettime(time.CLOCK_BOOTTIME)

    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        return event.wait(None if timeout is None else max(0.0, timeout))


SYSTEM: Clock = SystemClock()


def micro(now: dt.datetime) -> str:
    """`now` as a Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
