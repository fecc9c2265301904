"""The resources the runtime reads and writes, and the one set of verbs over all of them.

As client-go's dynamic client: a `Resource` describes a kind (group, version, plural, scope,
subresources), and `Verbs` is every call over any resource, written twice only: against the API
server (`recall.kube.http.HttpVerbs`) and over a dict (`recall_dev.twin.verbs.MemoryVerbs`, for
unit tests). The typed calls (`recall.kube.typed`) are thin wrappers over these.

Contract of every verb (`timeout`, `retry` and the typed errors as in `recall.kube.base`):
- objects go in and come out as the API server's JSON (`RawObject`);
- `get` answers None for a missing object, `delete` False; every other 404 is `NotFound` (a
  resource the server does not serve, such as KEDA's when KEDA is missing);
- a body with `metadata.resourceVersion` is applied only at that version, else `Conflict`;
  without it, to whatever is stored;
- the `status` subresource writes the status alone, the object itself all but its status; the
  `scale` subresource reads and writes its object's `spec.replicas`;
- `patch` is a JSON merge patch (RFC 7386), or a JSON patch (RFC 6902) when given a list.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from recall.base.backoff import Backoff
from recall.kube.base import EVERYTHING, THROTTLE, Page, RawObject, Selector, WatchEvent
from recall.resources import BATCH_PLURAL, GROUP, JOB_PLURAL, VERSION

Patch = RawObject | list[dict[str, Any]]


@dataclass(frozen=True)
class Resource:
    """One kind as the API serves it. `name` and `names` say it in messages and fault names."""

    group: str
    version: str
    plural: str
    kind: str
    name: str
    names: str
    namespaced: bool = True
    subresources: frozenset[str] = frozenset()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The API path of the collection (in `namespace`, or across all), an object, or its
        subresource."""
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        scope = f"/namespaces/{namespace}" if namespace and self.namespaced else ""
        tail = "".join(f"/{part}" for part in (name, subresource) if part)
        return f"{root}{scope}/{self.plural}{tail}"


_STATUS = frozenset({"status"})
JOBS = Resource(GROUP, VERSION, JOB_PLURAL, "TranscriptionJob", "job", "jobs", subresources=_STATUS)
BATCHES = Resource(GROUP, VERSION, BATCH_PLURAL, "Batch", "batch", "batches", subresources=_STATUS)
EVENTS = Resource("", "v1", "events", "Event", "event", "events")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", "lease", "leases")
CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap", "config_map", "config_maps")
SECRETS = Resource("", "v1", "secrets", "Secret", "secret", "secrets")
DEPLOYMENTS = Resource(
    "apps",
    "v1",
    "deployments",
    "Deployment",
    "deployment",
    "deployments",
    subresources=frozenset({"status", "scale"}),
)
PODS = Resource("", "v1", "pods", "Pod", "pod", "pods", subresources=_STATUS)
HPAS = Resource(
    "autoscaling",
    "v2",
    "horizontalpodautoscalers",
    "HorizontalPodAutoscaler",
    "horizontal_pod_autoscaler",
    "horizontal_pod_autoscalers",
    subresources=_STATUS,
)
SCALED_OBJECTS = Resource(
    "keda.sh",
    "v1alpha1",
    "scaledobjects",
    "ScaledObject",
    "scaled_object",
    "scaled_objects",
    subresources=_STATUS,
)


def describe(
    verb: str,
    resource: Resource,
    namespace: str | None,
    name: str = "",
    subresource: str | None = None,
) -> str:
    """A request in words, for messages: "patch status of job ns/a", "list leases in ns"."""
    if not name:
        return f"{verb} {resource.names}" + (f" in {namespace}" if namespace else "")
    what = f"{subresource} of {resource.name}" if subresource else resource.name
    return f"{verb} {what} {namespace}/{name}" if namespace else f"{verb} {what} {name}"


class Verbs(Protocol):
    """Every call over any resource; see the module contract."""

    def get(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        *,
        subresource: str | None = None,
        timeout: float | None = None,
        retry: Backoff | None = THROTTLE,
    ) -> RawObject | None: ...

    def list(
        self,
        resource: Resource,
        namespace: str | None,
        selector: Selector = EVERYTHING,
        *,
        limit: int | None = None,
        continue_from: str | None = None,
    ) -> Page: ...

    def watch(
        self,
        resource: Resource,
        namespace: str | None,
        resource_version: str,
        selector: Selector = EVERYTHING,
    ) -> Iterator[WatchEvent]:
        """Changes after `resource_version` until the server ends the watch; `Conflict` with
        status 410 when that version is too old (list again)."""
        ...

    def create(self, resource: Resource, namespace: str | None, body: RawObject) -> RawObject: ...

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
    ) -> RawObject: ...

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
    ) -> RawObject: ...

    def delete(self, resource: Resource, namespace: str | None, name: str) -> bool: ...

    def delete_collection(self, resource: Resource, namespace: str, selector: Selector) -> None:
        """One request for every object the selector selects; may take the server a while."""
        ...
