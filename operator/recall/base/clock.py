"""The clock: every time the runtime reads, waits for or sleeps through goes through a `Clock`.

    clock = SYSTEM                       # CLOCK_BOOTTIME and the UTC wall clock
    deadline = clock.monotonic() + 10
    clock.wait(stop, 5)                  # True once `stop` is set, False after 5 s
    clock.now()                          # a timestamp to record, never to compare across machines

As client-go's `clock.Clock`: one small interface handed to everything that waits, so a test
drives time with one `FakeClock` instead of sleeping. `monotonic` is CLOCK_BOOTTIME: monotonic,
and it keeps counting while the machine is suspended, so a renew deadline or an observed expiry
measured on it never shrinks across a suspend. Every duration the protocol judges (renew
deadlines, lease expiry, backoff, leader election, offers, probes) is measured on it. `now` is
for timestamps that are recorded (status times, Events), never compared across machines.

Outside the clock: log timestamps, kopf's own internals, and the engines' own timing of their
work (what a benchmark or a metric reports, not a decision).
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

EPOCH = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


class FakeClock:
    """A clock the test moves by hand (`step`, `set`), as client-go's `FakeClock`.

    `now()` follows `monotonic()` from `wall`. `sleep` moves the clock itself (a sleeper in
    the test's own thread returns at once) and records what was slept. `wait` blocks its thread
    until the event is set or the test has moved the clock past the timeout; `waiters()` says
    how many threads wait, so a test can step the clock once the code under test is waiting
    (never by sleeping for real).
    """

    def __init__(self, start: float = 1000.0, wall: dt.datetime = EPOCH) -> None:
        self._t = start
        self._start = start
        self._wall = wall
        self._cond = threading.Condition()
        self._waiting = 0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        with self._cond:
            return self._t

    def now(self) -> dt.datetime:
        with self._cond:
            return self._wall + dt.timedelta(seconds=self._t - self._start)

    def step(self, seconds: float) -> None:
        """Move the clock forward by `seconds`, waking the waiters whose time has come."""
        with self._cond:
            self._t += seconds
            self._cond.notify_all()

    def set(self, t: float) -> None:
        """Move the clock to `t` (never backwards)."""
        with self._cond:
            self._t = max(self._t, t)
            self._cond.notify_all()

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.step(max(0.0, seconds))

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        with self._cond:
            deadline = None if timeout is None else self._t + max(0.0, timeout)
            self._waiting += 1
            try:
                while not event.is_set():
                    if deadline is not None and self._t >= deadline:
                        return False
                    # An Event does not notify this condition: look at it again shortly.
                    self._cond.wait(0.01)
                return True
            finally:
                self._waiting -= 1

    def waiters(self) -> int:
        """How many threads are in `wait` now."""
        with self._cond:
            return self._waiting


def micro(now: dt.datetime) -> str:
    """`now` as a Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
