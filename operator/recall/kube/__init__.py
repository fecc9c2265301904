"""Every Kubernetes call: the `JobStore` protocol and its two implementations.

- `base`: the protocol (jobs, Batches, ConfigMaps, Leases, Events, the worker fleet's
  Deployment, scale subresource, pods and autoscalers) and the typed errors every
  caller sees instead of HTTP statuses (`Conflict`, `Invalid`, `TooLarge`, `Unavailable`, ...);
- `store`, `client`, `core`, `apps`: `KubeStore`, through the official client, with timeouts
  from the settings;
- `memory`, `memory_core`, `memory_apps`, `rules`, `patch`: `MemoryStore` for unit tests
  (resourceVersion and 409, the status subresource, the CRDs' CEL transition rules, the scale
  subresource, fault injection);
- `informer`: list + watch of a selection, relisted on 410 and after errors;
- `install`: `InstallReader`, the reads of an install `recall doctor` checks (CRDs,
  Deployments, pods, Leases, API fairness objects, SelfSubjectAccessReviews).

May import `recall.resources` and `recall.base`; never the protocol, a component or the engines.
"""

from recall.kube.base import (
    EVERYTHING,
    PERMANENT_ERRORS,
    BlobStore,
    ConfigMapData,
    Conflict,
    FleetStore,
    Forbidden,
    Invalid,
    JobStore,
    NotFound,
    ObjectRef,
    Owner,
    Page,
    RawObject,
    Scale,
    ScalerRef,
    Selector,
    Store,
    StoreError,
    TooLarge,
    Unavailable,
    WatchEvent,
    retry_pause,
)

__all__ = [
    "EVERYTHING",
    "PERMANENT_ERRORS",
    "BlobStore",
    "ConfigMapData",
    "Conflict",
    "FleetStore",
    "Forbidden",
    "Invalid",
    "JobStore",
    "NotFound",
    "ObjectRef",
    "Owner",
    "Page",
    "RawObject",
    "Scale",
    "ScalerRef",
    "Selector",
    "Store",
    "StoreError",
    "TooLarge",
    "Unavailable",
    "WatchEvent",
    "retry_pause",
]
