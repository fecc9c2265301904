"""The jobs a worker holds, as the API server sees them: a lost lease is noticed at once.

Renewals come seconds apart (`recall.worker.cadence`), so a worker's own writes find out late
that a lease was taken away (the job cancelled with its Batch, deleted, or reclaimed). One
informer per worker watches the jobs whose `status.lease.holder` names it (one that leaves the
selection arrives as DELETED); whatever suggests a held lease is gone (it left, it shows another
token, a relist lacks it) makes the holder verify (`LeaseHolder.verify`): that read decides. So:

- a lease taken away is noticed within the watch's delay and one read, and every stage of the
  attempt stops, without a write (a read costs no etcd write);
- nothing here can make a worker believe it holds a lease it lost, or lose one it holds: the
  watch is a hint, the fenced writes and the verifying read are the judges;
- while the watch is down nothing is lost: the cadence's writes still find out, and the renew
  deadline still stops the holder in time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from recall.kube import JobApi, RawObject, Selector
from recall.kube.informer import Informer, Selection
from recall.worker.holder import LeaseHolder


def _key_of(obj: RawObject) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _token_of(obj: RawObject) -> str | None:
    lease = (obj.get("status") or {}).get("lease") or {}
    token = lease.get("token")
    return str(token) if token else None


class HeldJobs:
    """The informer on this worker's leases, and the holders it tells."""

    def __init__(self, store: JobApi, namespace: str | None, worker: str) -> None:
        self._holders: dict[tuple[str, str], LeaseHolder] = {}
        self._lock = threading.Lock()
        source = Selection.jobs(store, namespace, Selector(fields=f"status.lease.holder={worker}"))
        self.informer = Informer(source, self, name="lease-watch")

    def start(self) -> None:
        self.informer.start()

    def stop(self) -> None:
        self.informer.stop(timeout=0)

    def hold(self, h: LeaseHolder) -> None:
        with self._lock:
            self._holders[h.known.key] = h

    def let_go(self, h: LeaseHolder) -> None:
        with self._lock:
            if self._holders.get(h.known.key) is h:
                del self._holders[h.known.key]

    # -- the informer's consumer ---------------------------------------------------------------

    def relisted(self, items: Iterator[RawObject]) -> None:
        tokens = {_key_of(o): _token_of(o) for o in items}
        with self._lock:
            holders = list(self._holders.items())
        for key, h in holders:
            if tokens.get(key) != h.token:
                h.verify("absent from a relist of the worker's leases")

    def changed(self, type_: str, obj: RawObject) -> None:
        with self._lock:
            h = self._holders.get(_key_of(obj))
        if h is None:
            return
        if type_ == "DELETED":
            h.verify("the job left the worker's leases")
        elif _token_of(obj) != h.token:
            h.verify("the job shows another lease")
