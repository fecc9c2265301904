"""The request path under the API client (kept for the names its callers import)."""

from recall.kube.http import HttpVerbs as KubeClient
from recall.kube.http import translate

__all__ = ["KubeClient", "translate"]
