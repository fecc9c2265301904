"""Each slot's engine thread: the engine runs beside the slot, so a lost lease or the end of the
grace period stops the work even while an engine call blocks.

`EngineThreads.call(h, cancel, fn)` runs `fn` on the calling slot's engine thread. Nothing starts
on a lease known lost (`check_stop` first); while `fn` runs, `check_stop` is polled every 0.1 s,
and when it raises, `cancel` is set and the call returns at once with that error. The engine
thread is then left to finish alone (its late result is discarded) and the slot gets a new one
for its next job. One thread per slot: the slots' engine calls run side by side.

Engine threads are daemons, which the interpreter does not wait for (a `ThreadPoolExecutor`'s
threads are joined at exit): an abandoned call that never returns does not keep the process,
and the GPU it holds, alive once the worker stopped. Not guaranteed: that an abandoned call
stops (the engine sees `cancel`); it ends with the process.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from recall.worker.deadline import LeaseLost
from recall.worker.holder import LeaseHolder

T = TypeVar("T")


class Stopped(Exception):
    """The worker is stopping and the grace period ended: release the lease."""


class _Thread:
    """One daemon thread that runs the calls given to it in order, each into its future."""

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue[tuple[concurrent.futures.Future[Any], Callable[[], Any]]] = (
            queue.SimpleQueue()
        )
        self._closed = threading.Event()
        threading.Thread(target=self._run, name="engine", daemon=True).start()

    def submit(self, fn: Callable[[], T]) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._calls.put((future, fn))
        return future

    def close(self) -> None:
        """Take no more calls: the thread ends after the one under way (if any)."""
        self._closed.set()
        self._calls.put((concurrent.futures.Future(), lambda: None))  # wakes a waiting thread

    def _run(self) -> None:
        while not self._closed.is_set():
            future, fn = self._calls.get()
            if self._closed.is_set() or not future.set_running_or_notify_cancel():
                future.cancel()
                continue
            try:
                future.set_result(fn())
            except BaseException as e:  # handed to the slot, which raises it
                future.set_exception(e)


class EngineThreads:
    """The slots' engine threads, which `recall.worker.attempt` calls the engine through."""

    def __init__(self, check_stop: Callable[[LeaseHolder], None]) -> None:
        self.check_stop = check_stop  # raises LeaseLost or Stopped
        self._slot = threading.local()  # each slot's engine thread
        self._threads: list[_Thread] = []
        self._lock = threading.Lock()  # the threads of every slot

    def _thread(self) -> _Thread:
        thread: _Thread | None = getattr(self._slot, "thread", None)
        if thread is None:
            thread = _Thread()
            self._slot.thread = thread
            with self._lock:
                self._threads.append(thread)
        return thread

    def call(self, h: LeaseHolder, cancel: threading.Event, fn: Callable[[], T]) -> T:
        """Run `fn` on the slot's engine thread (the module's guarantees)."""
        self.check_stop(h)  # nothing starts on a lease known lost
        thread = self._thread()
        future = thread.submit(fn)
        while True:
            try:
                return future.result(timeout=0.1)
            except concurrent.futures.TimeoutError:
                if future.done():
                    raise  # the engine's own TimeoutError (the same class), not the wait's
                try:
                    self.check_stop(h)
                except (LeaseLost, Stopped):
                    cancel.set()
                    # The engine thread may still be busy; a new one serves the next job.
                    thread.close()
                    self._slot.thread = None
                    with self._lock:
                        self._threads.remove(thread)
                    raise

    def shutdown(self) -> None:
        """Let every engine thread go (a call still running finishes alone, or with the
        process)."""
        with self._lock:
            for thread in self._threads:
                thread.close()
