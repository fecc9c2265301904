"""Recorders of a chaos run: every TranscriptionJob version seen, and who held the operator Lease.

`JobRecorder` lists and watches the run's TranscriptionJobs on its own client (not the code
under test) and appends one JSON line per version it sees to `path`:
`{"t": wall time seen, "type": LIST | LISTED | ADDED | MODIFIED | DELETED, "obj": {...}}`.
A LIST line starts a re-list (after a 410, or when the API server went away): versions written
while the API server was unreachable may be missing, and LISTED versions are seen late. The
watch is resumed from the last resourceVersion when it can be, so most restarts lose nothing.
It also keeps the current view (`current()`) and every lease token it saw per job, which the
fault injector uses to pick targets and stale tokens.

`LeaderTracker` reads the operator's coordination.k8s.io Lease every `interval` and appends a
line whenever its holder changes.

Both run on threads and never raise: API errors are retried with a short pause.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from recall.kube.client import load_api_client
from recall.resources import GROUP, JOB_PLURAL, VERSION

Obj = dict[str, Any]


def compact(obj: Obj) -> Obj:
    """What the checks need of a job: identity, labels, spec, status."""
    meta = obj.get("metadata") or {}
    return {
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
        "rv": int(meta.get("resourceVersion") or 0),
        "labels": meta.get("labels") or {},
        "spec": obj.get("spec") or {},
        "status": obj.get("status") or {},
    }


def compact_batch(obj: Obj) -> Obj:
    """What the checks need of a Batch version: its status (the items are in the final state)."""
    meta = obj.get("metadata") or {}
    return {
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "rv": int(meta.get("resourceVersion") or 0),
        "labels": {},
        "spec": {},
        "status": obj.get("status") or {},
    }


class _Lines:
    """An append-only JSONL file shared by threads."""

    def __init__(self, path: Path) -> None:
        self._file: TextIO = path.open("a", buffering=1 << 16)
        self._lock = threading.Lock()

    def write(self, record: Obj) -> None:
        with self._lock:
            self._file.write(json.dumps(record, separators=(",", ":")) + "\n")

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def flush(self) -> None:
        with self._lock:
            self._file.flush()


class JobRecorder:
    """Every version of the run's objects of one kind (TranscriptionJobs unless `plural` says
    otherwise); for Batches only the status is kept (`compact_batch`)."""

    def __init__(
        self, kubeconfig: Path, namespace: str, path: Path, plural: str = JOB_PLURAL
    ) -> None:
        self.namespace = namespace
        self.plural = plural
        self._compact = compact if plural == JOB_PLURAL else compact_batch
        self.path = path
        self._api = load_api_client(kubeconfig, pool_size=4)
        self._custom = client.CustomObjectsApi(self._api)
        self._out = _Lines(path)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._current: dict[str, Obj] = {}
        self._tokens: dict[str, dict[str, Obj]] = {}  # job -> token -> its lease, attempt
        self._last_seen = 0.0
        self.relists = 0
        self._thread = threading.Thread(
            target=self._run, name=f"chaos-recorder-{plural}", daemon=True
        )

    # -- the harness's side ------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=45)
        self._out.close()

    def flush(self) -> None:
        self._out.flush()

    def current(self) -> dict[str, Obj]:
        with self._lock:
            return dict(self._current)

    def tokens(self, job: str) -> dict[str, Obj]:
        with self._lock:
            return dict(self._tokens.get(job, {}))

    def last_seen(self) -> float:
        """Wall time of the last event (or list) received."""
        with self._lock:
            return self._last_seen

    # -- the thread --------------------------------------------------------------------------

    def _record(self, type_: str, obj: Obj, t: float) -> None:
        c = self._compact(obj)
        self._out.write({"t": t, "type": type_, "obj": c})
        with self._lock:
            self._last_seen = t
            name = c["name"]
            if type_ == "DELETED":
                self._current.pop(name, None)
                return
            old = self._current.get(name)
            if old is None or old["rv"] <= c["rv"]:
                self._current[name] = c
            lease = c["status"].get("lease")
            if lease:
                seen = self._tokens.setdefault(name, {})
                seen.setdefault(
                    lease["token"],
                    {"lease": lease, "attempt": c["status"].get("attempts", 0), "t": t},
                )

    def _list(self) -> str:
        out = self._custom.list_namespaced_custom_object(
            GROUP, VERSION, self.namespace, self.plural, _request_timeout=15
        )
        t = time.time()
        rv = str(out["metadata"]["resourceVersion"])
        self._out.write({"t": t, "type": "LIST", "rv": int(rv)})
        self.relists += 1
        for item in out.get("items") or []:
            self._record("LISTED", item, t)
        with self._lock:
            self._last_seen = t
        return rv

    def _run(self) -> None:
        rv: str | None = None
        while not self._stop.is_set():
            try:
                if rv is None:
                    rv = self._list()
                rv = self._watch(rv)
            except ApiException as e:
                if e.status == 410:
                    rv = None
                    continue
                self._stop.wait(0.2)
            except Exception:  # the API server is restarting: resume from `rv`
                self._stop.wait(0.2)

    def _watch(self, rv: str) -> str:
        w = watch.Watch()
        try:
            for event in w.stream(
                self._custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                self.namespace,
                self.plural,
                resource_version=rv,
                allow_watch_bookmarks=True,
                timeout_seconds=30,
                _request_timeout=(5, 45),
            ):
                t = time.time()
                kind, obj = event["type"], event["object"]
                if kind == "ERROR":
                    code = obj.get("code") if isinstance(obj, dict) else None
                    raise ApiException(status=code or 500, reason=str(obj)[:200])
                rv = str(obj["metadata"]["resourceVersion"])
                if kind != "BOOKMARK":
                    self._record(kind, obj, t)
                if self._stop.is_set():
                    break
        finally:
            w.stop()
        return rv


class LeaderTracker:
    """Who holds the operator Lease, over time (holder changes only)."""

    def __init__(
        self, kubeconfig: Path, namespace: str, name: str, path: Path, interval: float = 0.25
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.interval = interval
        self._api = load_api_client(kubeconfig, pool_size=2)
        self._coord = client.CoordinationV1Api(self._api)
        self._out = _Lines(path)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._holder: str | None = None
        self._thread = threading.Thread(target=self._run, name="chaos-leader", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._out.close()

    def holder(self) -> str | None:
        with self._lock:
            return self._holder

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with contextlib.suppress(Exception):
                lease = self._coord.read_namespaced_lease(
                    self.name, self.namespace, _request_timeout=2
                )
                holder = lease.spec.holder_identity if lease.spec else None
                with self._lock:
                    changed = holder != self._holder
                    self._holder = holder
                if changed:
                    self._out.write({"t": time.time(), "holder": holder})
