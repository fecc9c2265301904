"""`FakeClock`: the `recall.base.clock.Clock` a test moves by hand, as client-go's `FakeClock`."""

from __future__ import annotations

import datetime as dt
import threading

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
