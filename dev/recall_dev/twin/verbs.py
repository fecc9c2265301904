"""The in-memory twin of the API server: the verbs of `recall.kube.verbs` over a dict, for unit
tests of everything above the API client (`recall_dev.twin.api.MemoryApi` is the typed calls
over it).

It keeps what the API server guarantees and the code relies on, for every resource alike:
- resourceVersion: every change bumps a global counter; a write that names a stale version gets
  `Conflict`, a write that names none is applied to what is stored; a create of an existing
  name gets `Conflict`;
- the status subresource split: a write of `status` changes only the status, a write of the
  object everything but its status; the scale subresource reads and writes `spec.replicas`;
- what the API server checks and fills in (`recall_dev.twin.rules`): the CRDs' defaults and CEL
  transition rules, ConfigMaps up to 1 MiB and immutable ones; a refused write raises
  `Invalid` naming the rule and changes nothing;
- lists (paged) and watches with field and label selectors; a watch sends DELETED for an object
  that leaves its selection and ADDED for one that enters it, as the API server's watch cache
  does, and `Conflict(410)` when asked to start before the history it keeps.

Fault injection for tests: `inject(Fault(...))` makes matching calls fail, optionally after the
write was applied (`applied=True`: the answer is lost, the change is kept). A call is named
`<verb>_<resource>[_<subresource>]` ("get_job", "patch_job_status", "create_config_map"), with
the resource's plural for lists and collection deletes ("list_jobs", "delete_jobs"); an update
is named as a patch (a test's fault is about the write, whatever its verb).

Not modelled: admission webhooks, RBAC, garbage collection, finalizers, server-side apply.
"""

from __future__ import annotations

import copy
import itertools
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from recall.base.backoff import Backoff
from recall.base.clock import SYSTEM, Clock
from recall.kube.base import (
    EVERYTHING,
    THROTTLE,
    ApiError,
    Conflict,
    Invalid,
    NotFound,
    Page,
    RawObject,
    Selector,
    WatchEvent,
)
from recall.kube.patch import apply_merge_patch, merge_patch
from recall.kube.verbs import (
    Patch,
    Resource,
)
from recall_dev.twin.rules import created, refusal, scale_of, written
from recall_dev.twin.select import apply_json_patch, selected, selected_event

Key = tuple[str, str]


@dataclass
class Fault:
    """Make calls of `op` ("patch_job_status", "create_config_map", ...) fail with `error`.

    `name` limits it to one object; `applied=True` applies the write before raising (a lost
    answer); `times` counts how many calls it affects; `when` filters on the call's arguments
    (`patch`: what the write changes, for a status write the status patch).
    """

    op: str
    error: ApiError
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


def stamp(clock: Clock = SYSTEM) -> str:
    """The clock's now as the API server writes a timestamp (RFC 3339, seconds, UTC)."""
    return clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")


def _op(verb: str, resource: Resource, subresource: str | None = None) -> str:
    if verb in ("list", "deletecollection"):
        return f"{'list' if verb == 'list' else 'delete'}_{resource.names}"
    verb = "patch" if verb == "update" else verb
    return f"{verb}_{resource.name}" + (f"_{subresource}" if subresource else "")


class MemoryVerbs:
    """The verbs over a dict; see the module contract. Thread-safe."""

    def __init__(self, *, watch_seconds: float = 5.0, clock: Clock = SYSTEM) -> None:
        self.watch_seconds = watch_seconds
        self.clock = clock
        self._rv = itertools.count(1)
        self._last_rv = 0
        self._cond = threading.Condition()
        self._kinds: dict[Resource, _Kind] = {}
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

    def put(self, resource: Resource, namespace: str, obj: RawObject) -> RawObject:
        """Store `obj` as it is (what a controller or the kubelet would write)."""
        obj = {**obj, "metadata": {"namespace": namespace, **obj["metadata"]}}
        with self._cond:
            name = obj["metadata"]["name"]
            new = (namespace, name) not in self._kind(resource).objects
            return self._store(resource, namespace, name, obj, created=new)

    def objects(self, resource: Resource) -> list[RawObject]:
        """Every stored object of `resource`, in the order they were first stored."""
        with self._cond:
            return list(self._kind(resource).objects.values())

    # -- the verbs ---------------------------------------------------------------------------

    def get(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        *,
        subresource: str | None = None,
        timeout: float | None = None,
        retry: Backoff | None = THROTTLE,
    ) -> RawObject | None:
        with self._cond:
            self._check(_op("get", resource, subresource), name)
            obj = self._kind(resource).objects.get((namespace or "", name))
            if obj is None:
                return None
            return scale_of(obj) if subresource == "scale" else copy.deepcopy(obj)

    def list(
        self,
        resource: Resource,
        namespace: str | None,
        selector: Selector = EVERYTHING,
        *,
        limit: int | None = None,
        continue_from: str | None = None,
    ) -> Page:
        with self._cond:
            self._check(_op("list", resource), "")
            chosen = [
                copy.deepcopy(o)
                for (ns, _), o in sorted(self._kind(resource).objects.items())
                if (namespace is None or ns == namespace) and selected(o, selector)
            ]
            start = int(continue_from or 0)
            end = len(chosen) if not limit else start + limit
            nxt = str(end) if end < len(chosen) else None
            return Page(items=chosen[start:end], resource_version=str(self._last_rv), next=nxt)

    def watch(
        self,
        resource: Resource,
        namespace: str | None,
        resource_version: str,
        selector: Selector = EVERYTHING,
    ) -> Iterator[WatchEvent]:
        kind = self._kind(resource)
        since = int(resource_version or 0)
        deadline = self.clock.monotonic() + self.watch_seconds
        while self.clock.monotonic() < deadline:
            with self._cond:
                if self._closed:
                    return
                if len(kind.log) == kind.log.maxlen and since < kind.log[0][0] - 1:
                    raise Conflict("too old resource version", status=410)
                pending = [e for e in kind.log if e[0] > since]
                if not pending:
                    self._cond.wait(0.05)
                    continue
            for rv, type_, new, old in pending:
                since = rv
                if namespace is not None and new["metadata"].get("namespace") != namespace:
                    continue
                out = selected_event(type_, new, old, selector)
                if out is not None:
                    yield WatchEvent(out, copy.deepcopy(new))

    def create(self, resource: Resource, namespace: str | None, body: RawObject) -> RawObject:
        ns = namespace or ""
        obj = created(resource, copy.deepcopy(body), uuid.uuid4().hex[:5])
        name = obj["metadata"]["name"]

        def write() -> RawObject:
            if (ns, name) in self._kind(resource).objects:
                raise Conflict(f'{resource.plural} "{name}" already exists', status=409)
            self._admit(resource, name, None, obj)
            obj["metadata"] = {
                **obj["metadata"],
                "namespace": ns,
                "uid": str(uuid.uuid4()),
                "generation": 1,
                "creationTimestamp": stamp(self.clock),
            }
            return self._store(resource, ns, name, obj, created=True)

        return self._write(_op("create", resource), name, {"patch": body}, write)

    def replace(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        body: RawObject,
        *,
        subresource: str | None = None,
        timeout: float | None = None,
        retry: Backoff | None = THROTTLE,
    ) -> RawObject:
        ns = namespace or ""
        rv = (body.get("metadata") or {}).get("resourceVersion")
        with self._cond:
            current = self._kind(resource).objects.get((ns, name)) or {}
            part = subresource or "spec"
            change = merge_patch(current.get(part) or {}, body.get(part) or {})
        return self._change(
            resource, ns, name, rv, {"patch": change}, lambda cur: body, "update", subresource
        )

    def patch(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        patch: Patch,
        *,
        subresource: str | None = None,
        timeout: float | None = None,
        retry: Backoff | None = THROTTLE,
    ) -> RawObject:
        ns = namespace or ""
        if isinstance(patch, list):
            args: dict[str, Any] = {"patch": patch}
            rv = None

            def new(current: RawObject) -> RawObject:
                try:
                    out: RawObject = apply_json_patch(self._view(current, subresource), patch)
                except (ValueError, KeyError, IndexError, TypeError) as e:
                    raise Invalid(f"{resource.plural} {name!r}: {e}", status=422) from None
                return out

        else:
            rv = (patch.get("metadata") or {}).get("resourceVersion")
            args = {"patch": patch.get(subresource) if subresource == "status" else patch}

            def new(current: RawObject) -> RawObject:
                out: RawObject = apply_merge_patch(self._view(current, subresource), patch)
                return out

        return self._change(resource, ns, name, rv, args, new, "patch", subresource)

    def delete(self, resource: Resource, namespace: str | None, name: str) -> bool:
        with self._cond:
            self._check(_op("delete", resource), name)
            return self._delete(resource, namespace or "", name)

    def delete_collection(self, resource: Resource, namespace: str, selector: Selector) -> None:
        with self._cond:
            self._check(_op("deletecollection", resource), selector.labels or "")
            for ns, name in [
                k
                for k, o in self._kind(resource).objects.items()
                if k[0] == namespace and selected(o, selector)
            ]:
                self._delete(resource, ns, name)

    # -- internals ---------------------------------------------------------------------------

    def _kind(self, resource: Resource) -> _Kind:
        return self._kinds.setdefault(resource, _Kind())

    def _fault(self, op: str, name: str, **args: Any) -> Fault | None:
        self.calls.append((op, name))
        for f in self.faults:
            if f.op == op and f.times > 0 and (f.name is None or f.name == name):
                if f.when is not None and not f.when(args):
                    continue
                f.times -= 1
                return f
        return None

    def _check(self, op: str, name: str) -> None:
        fault = self._fault(op, name)
        if fault is not None:
            raise fault.error

    def _write(
        self, op: str, name: str, args: dict[str, Any], write: Callable[[], RawObject]
    ) -> RawObject:
        """`write()` under the lock, met by the faults injected for `op`."""
        with self._cond:
            fault = self._fault(op, name, **args)
            if fault is not None and not fault.applied:
                raise fault.error
            out = write()
            if fault is not None:
                raise fault.error
            return out

    def _change(
        self,
        resource: Resource,
        ns: str,
        name: str,
        rv: str | None,
        args: dict[str, Any],
        new: Callable[[RawObject], RawObject],
        verb: str,
        subresource: str | None,
    ) -> RawObject:
        def write() -> RawObject:
            current = self._get(resource, ns, name, rv)
            stored = written(resource, current, new(current), subresource)
            self._admit(resource, name, current, stored)
            out = self._store(resource, ns, name, stored)
            return scale_of(out) if subresource == "scale" else out

        return self._write(_op(verb, resource, subresource), name, args, write)

    def _view(self, obj: RawObject, subresource: str | None) -> RawObject:
        return scale_of(obj) if subresource == "scale" else obj

    def _admit(self, resource: Resource, name: str, old: RawObject | None, new: RawObject) -> None:
        message = refusal(resource, name, old, new)
        if message is not None:
            raise Invalid(message, status=422)

    def _get(self, resource: Resource, ns: str, name: str, rv: str | None) -> RawObject:
        obj = self._kind(resource).objects.get((ns, name))
        if obj is None:
            raise NotFound(f'{resource.plural} "{name}" not found', status=404)
        if rv is not None and rv != obj["metadata"]["resourceVersion"]:
            raise Conflict(
                f'Operation cannot be fulfilled on {resource.plural} "{name}": the object has '
                "been modified; please apply your changes to the latest version and try again",
                status=409,
            )
        return obj

    def _store(
        self, resource: Resource, ns: str, name: str, obj: RawObject, *, created: bool = False
    ) -> RawObject:
        kind = self._kind(resource)
        old = kind.objects.get((ns, name))
        new = copy.deepcopy(obj)
        self._last_rv = next(self._rv)
        rv = str(self._last_rv)
        new["metadata"] = {**new["metadata"], "resourceVersion": rv}
        kind.objects[(ns, name)] = new
        kind.log.append((int(rv), "ADDED" if created else "MODIFIED", new, old))
        self._cond.notify_all()
        return copy.deepcopy(new)

    def _delete(self, resource: Resource, ns: str, name: str) -> bool:
        kind = self._kind(resource)
        old = kind.objects.pop((ns, name), None)
        if old is None:
            return False
        self._last_rv = next(self._rv)
        rv = str(self._last_rv)
        gone = {**old, "metadata": {**old["metadata"], "resourceVersion": rv}}
        kind.log.append((int(rv), "DELETED", gone, old))
        self._cond.notify_all()
        return True
