"""The worker's side of a drain: the promise behind a scale-down that stops no busy worker.

    with drain.turn() as open_:          # the loop: one pick → claim → work, or nothing
        if open_: ...
    state, said = drain.answer(request)  # the registration, at every renewal

The operator asks an idle worker to drain through its registration Lease
(`recall.protocol.workers`). Each slot holds a turn from its pick until its work ends; `answer`
promises `drained` only once no turn is held (it waits `wait` seconds at most, else answers
busy, to be asked again at the next renewal), and from then on every turn is closed (no pick,
no claim, no self-service) until the request is removed (`answer(None)`).

`draining()` is what `/readyz` reads: a draining worker is not ready, so a ReplicaSet removes
it before any ready pod. Not guaranteed: that the operator hears the answer soon (it arrives
with the next renewal write), or that the pod is ever removed (the operator may cancel).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from recall.base import log
from recall.base.clock import SYSTEM, Clock
from recall.protocol.workers import BUSY, DRAINING, IDLE, answer

_log = log.get("drain")


class Drain:
    """Whether this worker takes work: the loop's turns and the operator's drain requests."""

    def __init__(self, worker: str = "", *, wait: float = 0.5, clock: Clock = SYSTEM) -> None:
        self.worker = worker
        self.clock = clock
        self.wait = wait
        self._cond = threading.Condition()
        self._turns = 0  # turns held: one per slot from a pick to the end of its work
        self._request: str | None = None  # the request answered `drained`, while it stands
        self._open = threading.Event()  # set while not draining
        self._open.set()

    def draining(self) -> bool:
        return self._request is not None

    def pause(self, timeout: float) -> None:
        """Wait at most `timeout` seconds for a drain to be cancelled (a drained loop's turn)."""
        self.clock.wait(self._open, timeout)

    @contextmanager
    def turn(self) -> Iterator[bool]:
        """One turn of a slot's loop: yields False (take nothing) while draining. Several
        slots hold turns at once; a drain is promised only while none does."""
        with self._cond:
            open_ = self._request is None
            if open_:
                self._turns += 1
        try:
            yield open_
        finally:
            if open_:
                with self._cond:
                    self._turns -= 1
                    self._cond.notify_all()

    def answer(self, request: str | None) -> tuple[str, str | None]:
        """The registration found drain `request` (None: none) on the Lease. Returns the state
        and the answer to write back."""
        if request is None:
            if self._request is not None:
                _log.info("drain_cancelled", worker=self.worker, request=self._request)
                self._request = None
                self._open.set()
            with self._cond:
                free = self._cond.wait_for(lambda: self._turns == 0, timeout=self.wait)
            return (IDLE if free else BUSY), None
        if self._request == request:
            return DRAINING, answer(request, drained=True)
        with self._cond:
            if not self._cond.wait_for(lambda: self._turns == 0, timeout=self.wait):
                _log.info("drain_refused", worker=self.worker, request=request)
                return BUSY, answer(request, drained=False)
            self._request = request  # from here on no turn opens
            self._open.clear()
        _log.info("drained", worker=self.worker, request=request)
        return DRAINING, answer(request, drained=True)
