"""The heartbeater: a named background thread that renews a lease on its cadence while the work
goes on inside `with Heartbeater(holder, cadence):`.

It never writes by itself: every renewal is the holder's (`LeaseHolder.renew`, fenced), so
the holder's guarantees hold (one write at a time, the renew deadline, the latest checkpoint
carried). It stops on exit of the `with` block, when the lease is lost, or at the renew
deadline; it never outlives the block by more than the join's bound.
"""

from __future__ import annotations

import threading

from recall.worker.cadence import Cadence
from recall.worker.deadline import LeaseLost
from recall.worker.holder import LeaseHolder


class Heartbeater:
    """Sleeps until `Cadence.due` (counting any successful write of the holder, not only its
    own), waking early when a checkpoint or a write changes that; after a failed write it tries
    again every `heartbeat / 4`."""

    def __init__(self, holder: LeaseHolder, cadence: Cadence) -> None:
        self.holder = holder
        self.cadence = cadence
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"heartbeat-{holder.name}", daemon=True
        )

    def __enter__(self) -> Heartbeater:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.holder.wake.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        h = self.holder
        while not self._stop.is_set() and not h.final:
            h.wake.clear()
            wait = self.cadence.due(
                since_renewal=h.seconds_since_renewal(),
                since_checkpoint=h.seconds_since_checkpoint(),
                pending=h.pending is not None,
            )
            if wait > 0.005:
                h.clock.wait(h.wake, wait)
                continue
            try:
                h.renew()
            except LeaseLost:
                return
            except Exception as e:  # a bug or an unexpected error: keep trying until the deadline
                h.log.warning("renew_error", error=str(e)[:200])
                try:
                    h.check()
                except LeaseLost:
                    return
                h.clock.wait(self._stop, self.cadence.heartbeat / 4)
