"""What the API client's typed calls (`recall.kube.typed`) guarantee, and the errors they raise.

The only way the runtime reads or writes Kubernetes objects, implemented twice over one set of
generic verbs (`recall.kube.verbs`): `recall.kube.client.KubeClient` (the API server) and
`recall_dev.twin.api.MemoryApi` (unit tests: resourceVersion, the status subresource and the
CRD's transition rules, in memory). The real API server stays the judge of semantics, in the
integration tests.

Contract of every typed call:
- Objects come back typed (`TranscriptionJob`, `Batch`) where callers need the whole object;
  lists and watches return raw dicts (`RawObject`), parsed only as far as needed (the operator
  keeps 100,000 jobs in memory).
- `timeout` (where offered) bounds that one request; else the client's default applies.
- `retry` (where offered) is how a 429 of API Priority and Fairness is sent again within that
  time (`THROTTLE` by default); None for a caller that retries on its own terms (a lease
  holder), so each write passes one retry loop only.
- A write with `resource_version` is applied only at that version, else `Conflict`; without
  it, to whatever is stored (the CRD's rules still apply).
- Errors are typed (the classes below), so callers decide by kind, never by HTTP status. An
  `Unavailable` with `maybe_applied` (a read timeout, a reset after sending, a 5xx after
  commit) is ambiguous, settled by reading the object again.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from recall.base.backoff import Backoff
from recall.resources import RawObject as RawObject  # re-exported: the clients speak it


class ApiError(Exception):
    """A read or write the API client could not do. `status` is the HTTP status, when there was
    one."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class NotFound(ApiError):
    """The object does not exist (404)."""


class Conflict(ApiError):
    """A write's resourceVersion is stale, or the object exists already (409)."""


class Invalid(ApiError):
    """Refused by the schema, a CEL transition rule or an admission policy (422); permanent: the
    message names the rule."""


class Forbidden(ApiError):
    """RBAC or an admission policy forbids the request for this identity (403)."""

    @property
    def by_authorizer(self) -> bool:
        """The authorizer (RBAC) refused, not an admission policy. A starting kube-apiserver
        refuses so for a moment, before its RBAC caches fill; an admission policy's refusal is
        an answer about the object."""
        return _AUTHORIZER_DENIAL.search(self.message) is not None


_AUTHORIZER_DENIAL = re.compile(r'User "[^"]*" cannot \S+ resource')


class TooLarge(ApiError):
    """The object or request is larger than the API server or etcd accept; permanent."""


class Unavailable(ApiError):
    """The API server could not be reached or did not answer in time (429, 5xx, timeouts,
    refused or reset connections); a retry may succeed.

    `maybe_applied`: a write may have been applied although no answer arrived. `retry_after`:
    the server's Retry-After in seconds, when sent (a 429, or a starting server's 503).
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        maybe_applied: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, status=status)
        self.maybe_applied = maybe_applied
        self.retry_after = retry_after

    @property
    def throttled(self) -> bool:
        """The API server refused the request to protect itself (429): it was not applied."""
        return self.status == 429


THROTTLE = Backoff(initial=0.125, cap=2.5, jitter=1.0)
"""A request turned away by a 429 without a Retry-After is sent again after 0.125-0.25 s,
doubling, 2.5-5 s at most (jittered: the clients turned away together come back apart)."""


def retry_pause(error: ApiError, pause: float, *, rng: random.Random | None = None) -> float:
    """Seconds to wait before retrying after `error`: the caller's `pause`, or after a 429 with
    Retry-After at least that, spread over [retry_after, 1.5 × retry_after] so the clients turned
    away come back apart. A 503's is ignored: a starting kube-apiserver sends Retry-After 5 and
    serves within a second, and waiting 5 s would let leases expire and views go stale."""
    after = error.retry_after if isinstance(error, Unavailable) and error.throttled else None
    if not after:
        return pause
    return max(pause, after * (1 + 0.5 * (rng or random).random()))


PERMANENT_ERRORS: tuple[type[ApiError], ...] = (Invalid, Forbidden, TooLarge)


@dataclass(frozen=True)
class Page:
    """One page of a list: the objects, the list's resourceVersion (to start a watch from) and
    the token of the next page (None on the last one)."""

    items: list[RawObject]
    resource_version: str
    next: str | None = None


@dataclass(frozen=True)
class WatchEvent:
    """ADDED, MODIFIED, DELETED or BOOKMARK, with the object (for a BOOKMARK only its
    metadata.resourceVersion matters)."""

    type: str
    object: RawObject


@dataclass(frozen=True)
class Selector:
    """Which objects a list or watch returns: kubectl's field and label selector syntax."""

    fields: str | None = None
    labels: str | None = None


EVERYTHING = Selector()


@dataclass(frozen=True)
class ObjectRef:
    """The object an Event is about."""

    kind: str
    namespace: str
    name: str
    uid: str | None = None
    api_version: str = "recall.dev/v1alpha1"


@dataclass(frozen=True)
class ConfigMapData:
    """A ConfigMap as the transcript store sees it."""

    name: str
    data: dict[str, str]
    resource_version: str | None = None


@dataclass(frozen=True)
class Owner:
    """The owner a new ConfigMap or job is garbage-collected with."""

    api_version: str
    kind: str
    name: str
    uid: str

    def reference(self) -> RawObject:
        """The `metadata.ownerReferences` entry: the controller, never blocking a deletion."""
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": False,
        }


@dataclass(frozen=True)
class Scale:
    """A Deployment's scale subresource: `spec.replicas`, its pods' label selector, and the
    Deployment's resourceVersion (a scale write at it fails if anything changed)."""

    replicas: int
    selector: str
    resource_version: str


@dataclass(frozen=True)
class ScalerRef:
    """A HorizontalPodAutoscaler or a KEDA ScaledObject and the object it scales."""

    kind: str
    name: str
    target_kind: str
    target_name: str
