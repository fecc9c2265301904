"""Each slot's engine thread: the engine runs beside the slot, so a lost lease or the end of the
grace period stops the work even while an engine call blocks.

`EngineThreads.call(h, cancel, fn)` runs `fn` on the calling slot's engine thread. Nothing starts
on a lease known lost (`check_stop` first); while `fn` runs, `check_stop` is polled every 0.1 s,
and when it raises, `cancel` is set and the call returns at once with that error. The engine
thread is then left to finish alone (its late result is discarded) and the slot gets a new one
for its next job. One thread per slot: the slots' engine calls run side by side. Not
guaranteed: that an abandoned call stops (the engine sees `cancel`).
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import TypeVar

from recall.worker.deadline import LeaseLost
from recall.worker.holder import LeaseHolder

T = TypeVar("T")


class Stopped(Exception):
    """The worker is stopping and the grace period ended: release the lease."""


class EngineThreads:
    """The slots' engine threads, which `recall.worker.attempt` calls the engine through."""

    def __init__(self, check_stop: Callable[[LeaseHolder], None]) -> None:
        self.check_stop = check_stop  # raises LeaseLost or Stopped
        self._slot = threading.local()  # each slot's engine thread (its executor)
        self._executors: list[concurrent.futures.ThreadPoolExecutor] = []
        self._lock = threading.Lock()  # the executors of every slot

    def _thread(self) -> concurrent.futures.ThreadPoolExecutor:
        executor: concurrent.futures.ThreadPoolExecutor | None = getattr(
            self._slot, "executor", None
        )
        if executor is None:
            executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="engine")
            self._slot.executor = executor
            with self._lock:
                self._executors.append(executor)
        return executor

    def call(self, h: LeaseHolder, cancel: threading.Event, fn: Callable[[], T]) -> T:
        """Run `fn` on the slot's engine thread (the module's guarantees)."""
        self.check_stop(h)  # nothing starts on a lease known lost
        executor = self._thread()
        future = executor.submit(fn)
        while True:
            try:
                return future.result(timeout=0.1)
            except concurrent.futures.TimeoutError:
                try:
                    self.check_stop(h)
                except (LeaseLost, Stopped):
                    cancel.set()
                    # The engine thread may still be busy; a new one serves the next job.
                    executor.shutdown(wait=False, cancel_futures=True)
                    self._slot.executor = None
                    with self._lock:
                        self._executors.remove(executor)
                    raise

    def shutdown(self) -> None:
        """Let every engine thread go (a call still running finishes alone)."""
        for executor in self._executors:
            executor.shutdown(wait=False, cancel_futures=True)
