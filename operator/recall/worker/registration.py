"""The worker's registration: it says it is alive in a coordination.k8s.io Lease.

A named daemon thread creates the Lease `recall-worker-<id>` (the record of
`recall.protocol.workers`) in the worker's namespace, renews it every `period` seconds and
deletes it on a clean stop. It tells the operator whom to offer work to; it has no part in a
job's lease. A failed renewal is logged and tried again a period later: the registration only
ever delays offers, never stops work.

Each renewal carries the worker's drain state and answer (`recall.worker.drain`) and its
engine's state (`recall.worker.preload`; no write of its own), and keeps the annotations it does
not own (the drain request itself).
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass

from recall.base import log
from recall.base.clock import SYSTEM, Clock
from recall.kube import ApiError, Conflict, JobApi, NotFound, RawObject
from recall.protocol.workers import EngineState, lease_name, read, registration
from recall.worker.drain import Drain

_log = log.get("registration")


@dataclass(eq=False)
class Registration:
    """The worker's own registration Lease, renewed from a daemon thread."""

    store: JobApi
    namespace: str
    worker: str
    engine: str
    _: KW_ONLY
    duration: int = 15
    period: float = 5.0
    drain: Drain | None = None
    pool: str = "default"
    slots: int = 1
    engine_state: Callable[[], EngineState] | None = None
    clock: Clock = SYSTEM

    def __post_init__(self) -> None:
        self.name = lease_name(self.worker)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="registration", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing and delete the Lease (best effort: it expires anyway)."""
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            self.store.delete_lease(self.namespace, self.name)
        except ApiError as e:
            _log.warning("unregister_failed", worker=self.worker, error=e.message[:200])

    def _body(self, now: dt.datetime, current: RawObject | None) -> RawObject:
        version = None if current is None else current["metadata"]["resourceVersion"]
        state, answer = None, None
        if self.drain is not None:
            state, answer = self.drain.answer(None if current is None else read(current).drain)
        return registration(
            self.namespace,
            self.worker,
            self.engine,
            duration=self.duration,
            now=now,
            pool=self.pool,
            slots=self.slots,
            resource_version=version,
            state=state,
            answer=answer,
            keep=None if current is None else current["metadata"].get("annotations"),
            engine_state=None if self.engine_state is None else self.engine_state(),
        )

    def renew_once(self) -> None:
        now = self.clock.now()
        current = self.store.get_lease(self.namespace, self.name)
        try:
            if current is None:
                self.store.create_lease(self.namespace, self._body(now, None))
            else:
                self.store.replace_lease(self.namespace, self.name, self._body(now, current))
        except (Conflict, NotFound):
            pass  # raced with itself (a restart) or a deletion: the next period settles it

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.renew_once()
            except ApiError as e:
                _log.warning("register_failed", worker=self.worker, error=e.message[:200])
            self.clock.wait(self._stop, self.period)
