"""Every Kubernetes call: one client over the resources.

- `base`: what the typed calls guarantee, and the typed errors callers see instead of HTTP
  statuses (`Conflict`, `Invalid`, `TooLarge`, `Unavailable`, ...);
- `verbs`: the resources as descriptors and the one set of generic verbs over them, as
  client-go's dynamic client; `http`: those verbs against the API server; `config`: the
  connection (kubeconfig or service account) and the namespace; `patch`: JSON merge patches;
- `typed`: `TypedClient` (`Api`), the typed calls, each a thin wrapper of a verb; `client`:
  `KubeClient`, the typed calls over the API server. Their in-memory twin, for unit tests, is
  `recall_dev.twin` (never in the image);
- `informer`: list + watch of a selection, relisted on 410 and after errors;
- `install`: `InstallReader`, the reads of an install that `recall doctor` checks.

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
