"""Every Kubernetes call: one client over the resources.

- `base`: what the typed calls guarantee (jobs, Batches, ConfigMaps, Secrets, Leases, Events,
  the worker fleet's Deployment, scale subresource, pods and autoscalers) and the typed errors
  every caller sees instead of HTTP statuses (`Conflict`, `Invalid`, `TooLarge`,
  `Unavailable`, ...);
- `verbs`: the resources as descriptors (group, version, plural, subresources) and the one set
  of generic verbs over them (get, list, watch, create, replace, patch, delete,
  delete-collection), as client-go's dynamic client;
- `http`: the verbs against the API server (`ApiClient.call_api`, timeouts, 429s); `config`:
  the connection (kubeconfig or service account) and the namespace;
- `patch`: JSON merge patches;
- `typed`: `TypedClient` (`Api`), the typed calls (`get_job`, `patch_scale`, ...), each a thin
  wrapper of a verb; `client`: `KubeClient`, the typed calls over the API server. Their
  in-memory twin, which the unit tests run on, is `recall_dev.twin` (never in the image);
- `informer`: list + watch of a selection, relisted on 410 and after errors;
- `install`: `InstallReader`, the reads of an install `recall doctor` checks (CRDs,
  Deployments, pods, Leases, API fairness objects, SelfSubjectAccessReviews).

May import `recall.resources` and `recall.base`; never the protocol, a component or the engines.
"""

from recall.kube.base import (
    EVERYTHING,
    PERMANENT_ERRORS,
    THROTTLE,
    ApiError,
    ConfigMapData,
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    ObjectRef,
    Owner,
    Page,
    RawObject,
    ScalerRef,
    Selector,
    TooLarge,
    Unavailable,
    WatchEvent,
    retry_pause,
)
from recall.kube.typed import Api, JobApi

__all__ = [
    "EVERYTHING",
    "PERMANENT_ERRORS",
    "THROTTLE",
    "Api",
    "ApiError",
    "ConfigMapData",
    "Conflict",
    "Forbidden",
    "Invalid",
    "JobApi",
    "NotFound",
    "ObjectRef",
    "Owner",
    "Page",
    "RawObject",
    "ScalerRef",
    "Selector",
    "TooLarge",
    "Unavailable",
    "WatchEvent",
    "retry_pause",
]
