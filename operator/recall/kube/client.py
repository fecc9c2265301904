"""`KubeClient`: the API client, the typed calls (`recall.kube.typed`) over the API server's
verbs (`recall.kube.http`)."""

from __future__ import annotations

from functools import cached_property

from kubernetes import client

from recall.base.clock import SYSTEM, Clock
from recall.kube.config import current_namespace, load_api_client
from recall.kube.http import MERGE_PATCH, HttpVerbs, api_message, translate
from recall.kube.typed import TypedClient

__all__ = [
    "MERGE_PATCH",
    "KubeClient",
    "api_message",
    "current_namespace",
    "load_api_client",
    "translate",
]


class KubeClient(TypedClient):
    """Jobs, Batches, ConfigMaps, Events, Leases and the worker fleet over one API client."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        timeout: float = 15.0,
        watch_seconds: int = 300,
        clock: Clock = SYSTEM,
    ) -> None:
        self.http = HttpVerbs(api, timeout=timeout, watch_seconds=watch_seconds, clock=clock)
        super().__init__(self.http, clock=clock)
        self.api = api

    # The official client's typed APIs over the same connection. Not used by the runtime: for
    # tools and tests that write as any other client would.

    @cached_property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    @cached_property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)
