"""When a lease holder writes: the heartbeat and the checkpoint on one wall-time cadence. Pure.

A holder renews at least every `heartbeat` seconds after its last successful write was sent,
and every renewal carries its checkpoint (the chunks whose objects are durable in the results
store). New durable progress is written no later than `checkpoint` seconds after the last write
that carried a checkpoint (the claim counts as one), never sooner unless a heartbeat falls due
first. So:

- a job's API writes are its claim, at most one renewal per `checkpoint` seconds while it makes
  progress (one per `heartbeat` while it does not), its complete (or fail, or release) and the
  operator's publish, whatever the number of chunks and the engine's speed;
- a resumed attempt redoes at most `checkpoint` seconds of engine work, plus the chunks that
  were still on their way into the store;
- an engine call starts only on a lease proven within `fresh` seconds: 1.5 heartbeats, so it
  never waits for a healthy heartbeater's write (at one it would meet that write in flight once
  an interval), capped halfway from the heartbeat to the renew deadline, so it starts with at
  least half of that margin left.

Not guaranteed: the cadence says when a write is due, not when it lands; a slow API server
delays it (the renew deadline bounds how long a holder keeps working without one).
"""

from __future__ import annotations

from dataclasses import dataclass

FRESH_HEARTBEATS = 1.5  # an engine call needs a write sent within this many heartbeats


@dataclass(frozen=True)
class Cadence:
    heartbeat: float
    checkpoint: float
    renew_deadline: float | None = None  # the holder's; None: no bound beside the heartbeat's

    def __post_init__(self) -> None:
        if self.heartbeat <= 0 or self.checkpoint <= 0:
            raise ValueError("the heartbeat and checkpoint intervals must be positive")
        if self.renew_deadline is not None and self.renew_deadline <= self.heartbeat:
            raise ValueError("the renew deadline must come after the heartbeat")

    @property
    def fresh(self) -> float:
        """How recently a write must have been sent for an engine call to start without one."""
        fresh = FRESH_HEARTBEATS * self.heartbeat
        if self.renew_deadline is not None:
            fresh = min(fresh, (self.heartbeat + self.renew_deadline) / 2)
        return fresh

    def due(self, *, since_renewal: float, since_checkpoint: float, pending: bool) -> float:
        """Seconds until the next renewal is due (zero or less: now). `since_renewal`: since the
        last successful write was sent; `since_checkpoint`: since the last such write with a
        checkpoint; `pending`: durable progress no write has carried yet."""
        wait = self.heartbeat - since_renewal
        if pending:
            wait = min(wait, self.checkpoint - since_checkpoint)
        return wait
