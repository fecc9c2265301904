"""The machinery of `MemoryStore`: versions, lists and watches with selectors, fault
injection, and the core-API objects (Events, coordination Leases, ConfigMaps)."""

from __future__ import annotations

import copy
import datetime as dt
import itertools
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from recall.kube.base import (
    ConfigMapData,
    Conflict,
    Invalid,
    NotFound,
    ObjectRef,
    Owner,
    Page,
    RawObject,
    Selector,
    StoreError,
    WatchEvent,
)
from recall.kube.patch import matches_fields, matches_labels

CONFIG_MAP_LIMIT = 1024 * 1024
JOB_SPEC_DEFAULTS = {
    "leaseDurationSeconds": 120,
    "maxAttempts": 5,
    "maxReleases": 10,
    "priority": 0,
}
Key = tuple[str, str]


@dataclass
class Fault:
    """Make calls of `op` ("patch_job_status", "create_config_map", ...) fail with `error`.

    `name` limits it to one object; `applied=True` applies the write before raising (a lost
    answer); `times` counts how many calls it affects; `when` filters on the call's arguments.
    """

    op: str
    error: StoreError
    name: str | None = None
    applied: bool = False
    times: int = 1
    when: Callable[[dict[str, Any]], bool] | None = None


@dataclass
class _Kind:
    objects: dict[Key, RawObject] = field(default_factory=dict)
    log: deque[tuple[int, str, RawObject, RawObject | None]] = field(
        default_factory=lambda: deque(maxlen=100_000)
    )


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class MemoryCore:
    """Versions, watches, faults, Events, Leases and ConfigMaps in memory. Thread-safe."""

    def __init__(self, *, watch_seconds: float = 5.0) -> None:
        self.watch_seconds = watch_seconds
        self._rv = itertools.count(1)
        self._last_rv = 0
        self._cond = threading.Condition()
        self._config_maps: dict[Key, RawObject] = {}
        self._leases = _Kind()
        self.events: list[RawObject] = []
        self.faults: list[Fault] = []
        self.calls: list[tuple[str, str]] = []  # (op, name): what was asked, for assertions
        self._closed = False

    # -- test controls -----------------------------------------------------------------------

    def inject(self, fault: Fault) -> None:
        with self._cond:
            self.faults.append(fault)

    def close(self) -> None:
        """End every watch (a test's teardown)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _fault(self, op: str, name: str, **args: Any) -> Fault | None:
        self.calls.append((op, name))
        for f in self.faults:
            if f.op == op and f.times > 0 and (f.name is None or f.name == name):
                if f.when is not None and not f.when(args):
                    continue
                f.times -= 1
                return f
        return None

    def _bump(self) -> str:
        self._last_rv = next(self._rv)
        return str(self._last_rv)

    # -- Events and Leases -------------------------------------------------------------------

    def post_event(self, about: ObjectRef, type_: str, reason: str, message: str) -> None:
        with self._cond:
            self._check("post_event", about.name)
            self.events.append(
                {
                    "involvedObject": {"kind": about.kind, "name": about.name},
                    "metadata": {"namespace": about.namespace, "uid": str(uuid.uuid4())},
                    "type": type_,
                    "reason": reason,
                    "message": message[:1024],
                    "lastTimestamp": _now(),
                }
            )

    def list_events(self, namespace: str, about: ObjectRef | None = None) -> list[RawObject]:
        with self._cond:
            return [
                copy.deepcopy(e)
                for e in self.events
                if e["metadata"]["namespace"] == namespace
                and (
                    about is None
                    or (
                        e["involvedObject"]["kind"] == about.kind
                        and e["involvedObject"]["name"] == about.name
                    )
                )
            ]

    def get_lease(self, namespace: str, name: str) -> RawObject | None:
        with self._cond:
            self._check("get_lease", name)
            obj = self._leases.objects.get((namespace, name))
            return copy.deepcopy(obj) if obj else None

    def create_lease(self, namespace: str, body: RawObject) -> RawObject:
        with self._cond:
            return self._create(self._leases, "create_lease", namespace, copy.deepcopy(body))

    def replace_lease(self, namespace: str, name: str, body: RawObject) -> RawObject:
        with self._cond:
            self._check("replace_lease", name)
            rv = body.get("metadata", {}).get("resourceVersion")
            current = self._get(self._leases, namespace, name, rv)
            obj = copy.deepcopy(body)
            obj["metadata"] = {**current["metadata"], **obj["metadata"]}
            return self._replace(self._leases, namespace, name, obj)

    def delete_lease(self, namespace: str, name: str) -> bool:
        with self._cond:
            self._check("delete_lease", name)
            return self._delete(self._leases, namespace, name)

    def list_leases(
        self,
        namespace: str | None,
        labels: str,
        *,
        limit: int | None = None,
        continue_from: str | None = None,
    ) -> Page:
        with self._cond:
            self._check("list_leases", "")
            selector = Selector(labels=labels)
            return self._list(self._leases, namespace, selector, limit, continue_from)

    def watch_leases(
        self, namespace: str | None, resource_version: str, labels: str
    ) -> Iterator[WatchEvent]:
        return self._watch(self._leases, namespace, resource_version, Selector(labels=labels))

    # -- ConfigMaps --------------------------------------------------------------------------

    def get_config_map(self, namespace: str, name: str) -> ConfigMapData | None:
        with self._cond:
            self._check("get_config_map", name)
            obj = self._config_maps.get((namespace, name))
            return None if obj is None else _cm(obj)

    def create_config_map(
        self,
        namespace: str,
        name: str,
        data: dict[str, str],
        *,
        labels: dict[str, str],
        owner: Owner | None = None,
        immutable: bool = False,
    ) -> None:
        with self._cond:
            fault = self._fault("create_config_map", name, data=data)
            if fault is not None and not fault.applied:
                raise fault.error
            if (namespace, name) in self._config_maps:
                raise Conflict(f'configmaps "{name}" already exists', status=409)
            _check_size(name, data)
            self._config_maps[(namespace, name)] = {
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": dict(labels),
                    "resourceVersion": self._bump(),
                    "ownerReferences": [owner.__dict__] if owner else [],
                },
                "data": dict(data),
                "immutable": immutable,
            }
            if fault is not None:
                raise fault.error

    def patch_config_map(self, namespace: str, name: str, data: dict[str, str]) -> None:
        with self._cond:
            self._check("patch_config_map", name)
            obj = self._config_maps.get((namespace, name))
            if obj is None:
                raise NotFound(f'configmaps "{name}" not found', status=404)
            if obj.get("immutable"):
                raise Invalid(f'configmaps "{name}": field is immutable', status=422)
            merged = {**obj["data"], **data}
            _check_size(name, merged)
            obj["data"] = merged
            obj["metadata"]["resourceVersion"] = self._bump()

    def own_config_map(self, namespace: str, name: str, owner: Owner) -> None:
        with self._cond:
            self._check("own_config_map", name)
            obj = self._config_maps.get((namespace, name))
            if obj is None:
                raise NotFound(f'configmaps "{name}" not found', status=404)
            obj["metadata"]["ownerReferences"] = [owner.__dict__]

    def delete_config_map(self, namespace: str, name: str) -> bool:
        with self._cond:
            self._check("delete_config_map", name)
            return self._config_maps.pop((namespace, name), None) is not None

    def list_config_maps(self, namespace: str, labels: str) -> list[ConfigMapData]:
        with self._cond:
            self._check("list_config_maps", "")
            return [
                _cm(o)
                for (ns, _), o in sorted(self._config_maps.items())
                if ns == namespace and matches_labels(o["metadata"]["labels"], labels)
            ]

    # -- internals ---------------------------------------------------------------------------

    def _check(self, op: str, name: str) -> None:
        fault = self._fault(op, name)
        if fault is not None:
            raise fault.error

    def _create(self, kind: _Kind, op: str, namespace: str, obj: RawObject) -> RawObject:
        self._check(op, obj["metadata"]["name"])
        key = (namespace, obj["metadata"]["name"])
        if key in kind.objects:
            raise Conflict(f'"{key[1]}" already exists', status=409)
        obj["metadata"] = {
            **obj["metadata"],
            "namespace": namespace,
            "uid": str(uuid.uuid4()),
            "generation": 1,
            "creationTimestamp": _now(),
        }
        return self._replace(kind, namespace, key[1], obj, created=True)

    def _get(self, kind: _Kind, namespace: str, name: str, rv: str | None) -> RawObject:
        obj = kind.objects.get((namespace, name))
        if obj is None:
            raise NotFound(f'"{name}" not found', status=404)
        if rv is not None and rv != obj["metadata"]["resourceVersion"]:
            raise Conflict(
                f'Operation cannot be fulfilled on "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again",
                status=409,
            )
        return obj

    def _replace(
        self, kind: _Kind, namespace: str, name: str, obj: RawObject, *, created: bool = False
    ) -> RawObject:
        old = kind.objects.get((namespace, name))
        new = copy.deepcopy(obj)
        rv = self._bump()
        new["metadata"] = {**new["metadata"], "resourceVersion": rv}
        kind.objects[(namespace, name)] = new
        kind.log.append((int(rv), "ADDED" if created else "MODIFIED", new, old))
        self._cond.notify_all()
        return copy.deepcopy(new)

    def _delete(self, kind: _Kind, namespace: str, name: str) -> bool:
        old = kind.objects.pop((namespace, name), None)
        if old is None:
            return False
        rv = self._bump()
        gone = {**old, "metadata": {**old["metadata"], "resourceVersion": rv}}
        kind.log.append((int(rv), "DELETED", gone, old))
        self._cond.notify_all()
        return True

    def _list(
        self,
        kind: _Kind,
        namespace: str | None,
        selector: Selector,
        limit: int | None,
        continue_from: str | None,
    ) -> Page:
        chosen = [
            copy.deepcopy(o)
            for (ns, _), o in sorted(kind.objects.items())
            if (namespace is None or ns == namespace) and _selected(o, selector)
        ]
        start = int(continue_from or 0)
        end = len(chosen) if not limit else start + limit
        nxt = str(end) if end < len(chosen) else None
        return Page(items=chosen[start:end], resource_version=str(self._last_rv), next=nxt)

    def _watch(
        self, kind: _Kind, namespace: str | None, rv: str, selector: Selector
    ) -> Iterator[WatchEvent]:
        since = int(rv or 0)
        deadline = threading.Event()
        timer = threading.Timer(self.watch_seconds, deadline.set)
        timer.daemon = True
        timer.start()
        try:
            while not deadline.is_set():
                with self._cond:
                    if self._closed:
                        return
                    if len(kind.log) == kind.log.maxlen and since < kind.log[0][0] - 1:
                        raise Conflict("too old resource version", status=410)
                    pending = [e for e in kind.log if e[0] > since]
                    if not pending:
                        self._cond.wait(0.05)
                        continue
                for rv_, type_, new, old in pending:
                    since = rv_
                    ns = new["metadata"].get("namespace")
                    if namespace is not None and ns != namespace:
                        continue
                    out = _selected_event(type_, new, old, selector)
                    if out is not None:
                        yield WatchEvent(out, copy.deepcopy(new))
        finally:
            timer.cancel()


def _selected(obj: RawObject, selector: Selector) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return matches_fields(obj, selector.fields) and matches_labels(labels, selector.labels)


def _selected_event(
    type_: str, new: RawObject, old: RawObject | None, selector: Selector
) -> str | None:
    now_in = type_ != "DELETED" and _selected(new, selector)
    was_in = old is not None and _selected(old, selector)
    if type_ == "DELETED":
        return "DELETED" if was_in else None
    if now_in and not was_in:
        return "ADDED"
    if was_in and not now_in:
        return "DELETED"
    return "MODIFIED" if now_in else None


def _check_size(name: str, data: dict[str, str]) -> None:
    size = sum(len(k.encode()) + len(v.encode()) for k, v in data.items())
    if size > CONFIG_MAP_LIMIT:
        raise Invalid(
            f'ConfigMap "{name}" is invalid: []: Too long: must have at most {CONFIG_MAP_LIMIT} '
            "bytes",
            status=422,
        )


def _cm(obj: RawObject) -> ConfigMapData:
    return ConfigMapData(
        name=obj["metadata"]["name"],
        data=dict(obj["data"]),
        labels=dict(obj["metadata"]["labels"]),
        resource_version=obj["metadata"]["resourceVersion"],
    )
