"""The API client under `KubeStore`: loading a kubeconfig, typed errors, one request.

Every request carries a timeout; every failure becomes one of the typed errors of
`recall.kube.base`, so no caller looks at HTTP statuses. A 429 (API Priority and Fairness
turning the request away before it ran) is sent again after its Retry-After, jittered, for as
long as the request's own timeout allows; then the caller gets `Unavailable` with
`retry_after`, and backs off on its own terms.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from recall.base import faults, metrics
from recall.kube.base import (
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    Page,
    Selector,
    StoreError,
    TooLarge,
    Unavailable,
    WatchEvent,
    retry_pause,
)
from recall.resources import GROUP, VERSION

MERGE_PATCH = "application/merge-patch+json"
THROTTLE_PAUSE = 0.25  # first pause after a 429 without a Retry-After; doubles, up to 5 s
T = TypeVar("T")

# Transport failures that happen before the request is sent: a write cannot have been applied.
NOT_SENT: tuple[type[BaseException], ...] = (
    urllib3.exceptions.NewConnectionError,
    urllib3.exceptions.ConnectTimeoutError,
    ConnectionRefusedError,
)
TRANSPORT: tuple[type[BaseException], ...] = (urllib3.exceptions.HTTPError, OSError)


def load_api_client(
    kubeconfig: str | Path | None = None, context: str | None = None, *, pool_size: int = 16
) -> client.ApiClient:
    """An API client from the given kubeconfig, $KUBECONFIG, ~/.kube/config, or in-cluster."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    cfg = client.Configuration()
    if path is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=cfg)
    else:
        config.load_kube_config(
            config_file=str(path) if path else None, context=context, client_configuration=cfg
        )
    # Several threads (heartbeater, watcher, main loop) share one client.
    cfg.connection_pool_maxsize = pool_size
    # No hidden retries: the callers retry on their own terms (a lease holder only until its
    # renew deadline), and a write retried blindly could be applied twice.
    cfg.retries = urllib3.util.retry.Retry(total=0, connect=0, read=0, redirect=3, status=0)
    return client.ApiClient(cfg)


def current_namespace(kubeconfig: str | Path | None = None) -> str:
    """The namespace of the pod (in a cluster) or of the kubeconfig's current context."""
    sa_ns = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
    if os.environ.get("KUBERNETES_SERVICE_HOST") and sa_ns.exists():
        return sa_ns.read_text().strip()
    try:
        _, active = config.list_kube_config_contexts(
            config_file=str(kubeconfig or os.environ.get("KUBECONFIG") or "") or None
        )
    except (config.ConfigException, OSError):
        return "default"
    ns: str = (active or {}).get("context", {}).get("namespace") or "default"
    return ns


def api_message(e: ApiException) -> str:
    """The `message` of a Kubernetes Status error body, or the HTTP reason."""
    try:
        body = json.loads(e.body or "{}")
    except (TypeError, ValueError):
        return str(e.reason)
    return str(body.get("message") or e.reason) if isinstance(body, dict) else str(e.reason)


def retry_after_of(e: ApiException) -> float | None:
    """The Retry-After of an error answer, in seconds (Kubernetes sends whole seconds)."""
    headers = e.headers or {}
    value = headers.get("Retry-After") or headers.get("retry-after")
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and seconds >= 0 else None


def translate(e: BaseException, what: str, *, write: bool) -> StoreError:
    """The typed store error for a failed request `what` (e.g. "patch job ns/name")."""
    if isinstance(e, ApiException):
        status = int(e.status or 0)
        text = f"{what}: {api_message(e)}"
        if status == 404:
            return NotFound(text, status=status)
        if status == 409:
            return Conflict(text, status=status)
        if status == 410:
            # Expired: the resourceVersion (of a watch, or a list's continue token) is too old.
            # The client raises this itself for a watch's ERROR event: the caller lists again.
            return Conflict(text, status=status)
        if status in (400, 422):
            return Invalid(text, status=status)
        if status == 403:
            return Forbidden(text, status=status)
        if status == 413 or "too large" in text.lower():
            return TooLarge(text, status=status)
        if status == 0 and e.reason:  # the client wraps some transport errors this way
            return Unavailable(f"{what}: {e.reason}", maybe_applied=write)
        # 401 (a rotated token), 429, 5xx: worth retrying. A 5xx may come after the commit; a
        # 429 is API Priority and Fairness turning the request away before it ran.
        return Unavailable(
            text,
            status=status,
            maybe_applied=write and status >= 500,
            retry_after=retry_after_of(e),
        )
    if isinstance(e, NOT_SENT):
        return Unavailable(f"{what}: cannot connect: {e}", maybe_applied=False)
    return Unavailable(f"{what}: {type(e).__name__}: {e}", maybe_applied=write)


class KubeClient:
    """One API client, its timeouts, and the request, list and watch every store call uses."""

    def __init__(
        self, api: client.ApiClient, *, timeout: float = 15.0, watch_seconds: int = 300
    ) -> None:
        self.api = api
        self.timeout = timeout
        self.watch_seconds = watch_seconds
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.coordination = client.CoordinationV1Api(api)
        self.latency = faults.latency()  # tests only: a slow API server

    def _call(
        self,
        what: str,
        fn: Callable[..., T],
        *args: Any,
        write: bool,
        timeout: float | None = None,
        **kw: Any,
    ) -> T:
        if self.latency:
            time.sleep(self.latency)
        budget = timeout or self.timeout
        deadline = time.monotonic() + budget
        pause = THROTTLE_PAUSE
        while True:
            left = deadline - time.monotonic()
            try:
                return fn(*args, _request_timeout=max(0.05, left), **kw)
            except (ApiException, *TRANSPORT) as e:
                error = translate(e, what, write=write)
                if not (isinstance(error, Unavailable) and error.throttled):
                    raise error from e
                # A 429 of API Priority and Fairness: turned away before it ran, so any verb
                # may be sent again, no sooner than its Retry-After (jittered), within this
                # request's own time.
                metrics.API_THROTTLED.labels(verb=what.split(" ", 1)[0]).inc()
                wait = retry_pause(error, pause * random.uniform(0.5, 1.0))
                if time.monotonic() + wait >= deadline:
                    raise error from e
                time.sleep(wait)
                pause = min(pause * 2, 5.0)

    # -- TranscriptionJobs -------------------------------------------------------------------

    def _list(
        self,
        plural: str,
        namespace: str | None,
        selector: Selector,
        *,
        limit: int | None = None,
        continue_from: str | None = None,
    ) -> Page:
        kw: dict[str, Any] = {}
        if selector.fields:
            kw["field_selector"] = selector.fields
        if selector.labels:
            kw["label_selector"] = selector.labels
        if limit:
            kw["limit"] = limit
        if continue_from:
            kw["_continue"] = continue_from
        if namespace:
            out: dict[str, Any] = self._call(
                f"list {plural} in {namespace}",
                self.custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                plural,
                write=False,
                **kw,
            )
        else:
            out = self._call(
                f"list {plural}",
                self.custom.list_cluster_custom_object,
                GROUP,
                VERSION,
                plural,
                write=False,
                **kw,
            )
        meta = out.get("metadata") or {}
        return Page(
            items=list(out.get("items") or []),
            resource_version=str(meta.get("resourceVersion") or ""),
            next=meta.get("continue") or None,
        )

    def _watch(
        self,
        what: str,
        func: Callable[..., Any],
        args: tuple[str, ...],
        resource_version: str,
        kw: dict[str, Any],
    ) -> Iterator[WatchEvent]:
        kw = kw | {
            "resource_version": resource_version,
            "timeout_seconds": self.watch_seconds,
            "allow_watch_bookmarks": True,
            "_request_timeout": (self.timeout, self.watch_seconds + 30),
        }
        w = watch.Watch()
        try:
            for event in w.stream(func, *args, **kw):
                kind = event["type"]
                obj = event.get("raw_object", event["object"])
                if kind == "ERROR":
                    code = int(obj.get("code") or 500) if isinstance(obj, dict) else 500
                    message = obj.get("message", "") if isinstance(obj, dict) else str(obj)
                    if code == 410:
                        raise Conflict(f"{what}: {message}", status=410)
                    raise Unavailable(f"{what}: {code} {message}", status=code)
                yield WatchEvent(kind, obj)
        except (ApiException, *TRANSPORT) as e:
            raise translate(e, what, write=False) from e
        finally:
            w.stop()
