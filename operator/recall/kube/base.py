"""What the API client's typed calls (`recall.kube.typed`) guarantee, and the errors they raise.

The API client is the only way the runtime reads or writes Kubernetes objects. Two
implementations of the same typed calls over one set of generic verbs (`recall.kube.verbs`):
`recall.kube.client.KubeClient` (the API server) and `recall_dev.twin.api.MemoryApi` (unit
tests: resourceVersion, the status subresource and the CRD's transition rules, in memory). The
real API server stays the judge of semantics in the integration tests; the twin only lets
everything above the client run without etcd.

Contract of every typed call:
- Objects are returned typed (`TranscriptionJob`, `Batch`) where callers need the whole object;
  lists and watches return raw dicts (`RawObject`), which callers parse only as far as they
  need (the operator keeps 100,000 jobs in memory).
- `timeout` (where offered) bounds that one request; otherwise the client's default applies.
- `retry` (where offered) is how a request turned away by API Priority and Fairness (429) is
  sent again within that time (`THROTTLE` by default); None for a caller that retries on its
  own terms (a lease holder), so that each write passes one retry loop only.
- A write with `resource_version` is applied only if the object is still at that version, else
  `Conflict`. A write without it is applied to whatever is stored (the CRD's rules still apply).
- Errors are typed so callers decide by kind, never by HTTP status:
  `NotFound` (404), `Conflict` (409), `Invalid` (422: the schema, a CEL rule or an admission
  policy refused the write; permanent, the message names the rule), `Forbidden` (403),
  `TooLarge` (the object or request exceeds what the API server or etcd accept; permanent),
  `Unavailable` (429, 5xx, timeouts, refused or reset connections; transient). `Unavailable`
  carries `maybe_applied`: True when the request may have reached the server and been applied
  even though no answer came back (a read timeout, a reset after sending, a 5xx after commit).
  Such an outcome is ambiguous and is settled by reading the object again.
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
    """The object does not exist."""


class Conflict(ApiError):
    """The object changed since the resourceVersion the write was based on (or exists already)."""


class Invalid(ApiError):
    """The API server refused the object: schema, CEL transition rule or admission policy."""


class Forbidden(ApiError):
    """RBAC or an admission policy forbids the request for this identity."""

    @property
    def by_authorizer(self) -> bool:
        """The authorizer (RBAC) refused, not an admission policy: its message names the user
        and what it cannot do. A kube-apiserver that is starting serves requests before its
        RBAC caches are filled and refuses so for a moment; an admission policy's refusal
        (`... denied request: ...`) is an answer about the object."""
        return _AUTHORIZER_DENIAL.search(self.message) is not None


_AUTHORIZER_DENIAL = re.compile(r'User "[^"]*" cannot \S+ resource')


class TooLarge(ApiError):
    """The object or request is larger than the API server or etcd accept."""


class Unavailable(ApiError):
    """The API server could not be reached or did not answer in time; a retry may succeed.

    `maybe_applied` is True when a write may have been applied although no answer arrived.
    `retry_after` is the server's Retry-After in seconds (a 429 from API Priority and Fairness,
    a 503 of a server that is starting), when it sent one; `retry_pause` waits out a 429's.
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
    """Seconds to wait before retrying after `error`: the caller's own `pause`, or, when the
    server throttled the request (429) with a Retry-After, at least that, spread over
    [retry_after, 1.5 × retry_after] so that the clients it turned away do not all come back at
    once. Only a 429's is waited out: a kube-apiserver that is starting answers 503 with
    Retry-After 5 and serves within a second, and waiting 5 s there would let leases expire and
    views go stale; the caller's own backoff is short, and each retry is one cheap request."""
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
    """A Deployment's scale subresource as read: the count asked for (`spec.replicas`), its
    pods' label selector, and the Deployment's resourceVersion (a scale write at that version
    fails if anything changed)."""

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
