"""Worker registrations: each worker says it is alive in a coordination.k8s.io Lease.

Worker side — `Registration`: a named thread creates the Lease `recall-worker-<id>` in the
worker's namespace (labels: component worker, the engine), renews it every `period` seconds
and deletes it on a clean stop. It is how the operator knows whom to offer work to; it has no
part in the lease protocol of jobs (a job's lease lives in the job).

Operator side — `Registry`: the informer's consumer for those Leases. A worker counts as alive
while its Lease's renewTime changed within `leaseDurationSeconds` on the operator's own
monotonic clock (observed, as job leases are; never compared with the worker's clock).
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from recall import log
from recall.models import LABEL_COMPONENT, label_value
from recall.store import Conflict, JobStore, NotFound, RawObject, StoreError

LABEL_ENGINE = "recall.dev/engine"
SELECTOR = f"{LABEL_COMPONENT}=worker,{LABEL_ENGINE}"
Monotonic = Callable[[], float]
_log = log.get("registration")


def lease_name(worker: str) -> str:
    return f"recall-worker-{worker}"[:253]


def _micro(now: dt.datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Registration:
    """The worker's own registration Lease, renewed from a daemon thread."""

    def __init__(
        self,
        store: JobStore,
        namespace: str,
        worker: str,
        engine: str,
        *,
        duration: int = 15,
        period: float = 5.0,
    ) -> None:
        self.store = store
        self.namespace = namespace
        self.worker = worker
        self.engine = engine
        self.duration = duration
        self.period = period
        self.name = lease_name(worker)
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
        except StoreError as e:
            _log.warning("unregister_failed", worker=self.worker, error=e.message[:200])

    def _body(self, now: dt.datetime, current: RawObject | None) -> RawObject:
        meta: RawObject = {
            "name": self.name,
            "namespace": self.namespace,
            "labels": {LABEL_COMPONENT: "worker", LABEL_ENGINE: label_value(self.engine)},
        }
        if current is not None:
            meta["resourceVersion"] = current["metadata"]["resourceVersion"]
        spec = {
            "holderIdentity": self.worker,
            "leaseDurationSeconds": self.duration,
            "renewTime": _micro(now),
        }
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": spec,
        }

    def renew_once(self) -> None:
        now = dt.datetime.now(dt.UTC)
        current = self.store.get_lease(self.namespace, self.name)
        try:
            if current is None:
                self.store.create_lease(self.namespace, self._body(now, None))
            else:
                self.store.replace_lease(self.namespace, self.name, self._body(now, current))
        except (Conflict, NotFound):
            pass  # raced with ourselves (a restart) or a deletion: the next period settles it

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.renew_once()
            except StoreError as e:
                _log.warning("register_failed", worker=self.worker, error=e.message[:200])
            self._stop.wait(self.period)


@dataclass(frozen=True)
class Seen:
    """A worker's registration as observed: when its renewTime last changed, on our clock."""

    worker: str
    namespace: str
    engine: str
    renew_time: str
    duration: float
    observed_at: float

    def alive(self, now_mono: float) -> bool:
        return now_mono - self.observed_at < self.duration


class Registry:
    """The live workers, from their registration Leases. The informer's consumer."""

    def __init__(self, clock: Monotonic, wake: Callable[[], None] = lambda: None) -> None:
        self.clock = clock
        self.wake = wake
        self._seen: dict[tuple[str, str], Seen] = {}
        self._lock = threading.Lock()

    def relisted(self, items: Iterator[RawObject]) -> None:
        keep = set()
        for raw in items:
            keep.add(self._put(raw))
        with self._lock:
            for key in [k for k in self._seen if k not in keep]:
                del self._seen[key]
        self.wake()

    def changed(self, type_: str, obj: RawObject) -> None:
        if type_ == "DELETED":
            meta = obj.get("metadata") or {}
            with self._lock:
                spec = obj.get("spec") or {}
                self._seen.pop(
                    (meta.get("namespace") or "", spec.get("holderIdentity") or ""), None
                )
        else:
            self._put(obj)
        self.wake()

    def _put(self, raw: RawObject) -> tuple[str, str]:
        meta, spec = raw.get("metadata") or {}, raw.get("spec") or {}
        worker = str(spec.get("holderIdentity") or "")
        key = (str(meta.get("namespace") or ""), worker)
        renew = str(spec.get("renewTime") or "")
        with self._lock:
            old = self._seen.get(key)
            if old is None or old.renew_time != renew:
                self._seen[key] = Seen(
                    worker=worker,
                    namespace=key[0],
                    engine=str((meta.get("labels") or {}).get(LABEL_ENGINE) or ""),
                    renew_time=renew,
                    duration=float(spec.get("leaseDurationSeconds") or 15),
                    observed_at=self.clock(),
                )
        return key

    def suspect(self, namespace: str, worker: str) -> None:
        """`worker` let a lease expire: count it as not alive until its registration's
        renewTime changes again."""
        with self._lock:
            old = self._seen.get((namespace, worker))
            if old is not None:
                self._seen[(namespace, worker)] = replace(old, observed_at=float("-inf"))

    def alive(self, now_mono: float) -> list[Seen]:
        with self._lock:
            return [s for s in self._seen.values() if s.worker and s.alive(now_mono)]
