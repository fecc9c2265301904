"""The verbs against the API server: one request path for every resource, over the official
client's `ApiClient.call_api` (not the generated per-kind clients).

Every request carries a timeout; every failure becomes a typed error of `recall.kube.base`. A
429 (turned away by API Priority and Fairness before it ran) is sent again on the call's `retry`
backoff, no sooner than its Retry-After (jittered), while the request's own timeout allows; then
the caller gets `Unavailable` with `retry_after`. With `retry=None` the 429 is raised at once:
one retry loop per write. Every wait and deadline is on the client's `Clock`.

A watch stream read that waits `WATCH_READ_SECONDS` for a byte (an event or a bookmark) ends
the watch quietly, as the server ending it would: a half-open connection is noticed within that
bound (or sooner by TCP keepalive, `recall.kube.config`), and the informer watches again from
the last version it saw. A refused connection, a failed DNS lookup or a connect timeout is "not
sent" (`maybe_applied=False`), also when urllib3 reports it as `MaxRetryError`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from recall.base import faults, metrics
from recall.base.backoff import Backoff
from recall.base.clock import SYSTEM, Clock
from recall.kube.base import (
    EVERYTHING,
    THROTTLE,
    ApiError,
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    Page,
    RawObject,
    Selector,
    TooLarge,
    Unavailable,
    WatchEvent,
    retry_pause,
)
from recall.kube.verbs import Patch, Resource, describe
from recall.resources import GROUP, VERSION

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
T = TypeVar("T")

# Transport failures that happen before the request is sent: a write cannot have been applied.
NOT_SENT: tuple[type[BaseException], ...] = (
    urllib3.exceptions.NewConnectionError,
    urllib3.exceptions.ConnectTimeoutError,
    ConnectionRefusedError,
)
TRANSPORT: tuple[type[BaseException], ...] = (urllib3.exceptions.HTTPError, OSError)
# The longest a watch waits for its next line. With allowWatchBookmarks the API server sends a
# bookmark about every minute even when nothing changes; silence past this is a connection
# that died without a FIN or RST (a node gone, a NAT entry dropped), not a quiet selection.
WATCH_READ_SECONDS = 90.0
# 410 Expired: the resourceVersion (of a watch, or a list's continue token) is too old.
ERRORS = {404: NotFound, 409: Conflict, 410: Conflict, 400: Invalid, 422: Invalid, 403: Forbidden}


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
    try:
        seconds = float(headers.get("Retry-After") or headers.get("retry-after") or "")
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def translate(e: BaseException, what: str, *, write: bool) -> ApiError:
    """The typed error for a failed request `what` (e.g. "patch status of job ns/name")."""
    if isinstance(e, urllib3.exceptions.MaxRetryError) and e.reason is not None:
        # With Retry(total=0) (recall.kube.config) every transport failure comes wrapped in
        # MaxRetryError: judge what happened by the failure inside.
        e = e.reason
    if isinstance(e, ApiException):
        status = int(e.status or 0)
        text = f"{what}: {api_message(e)}"
        error = ERRORS.get(status)
        if error is None and (status == 413 or "too large" in text.lower()):
            error = TooLarge
        if error is not None:
            return error(text, status=status)
        if status == 0 and e.reason:  # the client wraps some transport errors this way
            return Unavailable(f"{what}: {e.reason}", maybe_applied=write)
        # 401 (a rotated token), 429, 5xx: worth retrying; a 5xx may come after the commit.
        return Unavailable(
            text,
            status=status,
            maybe_applied=write and status >= 500,
            retry_after=retry_after_of(e),
        )
    if isinstance(e, NOT_SENT):
        return Unavailable(f"{what}: cannot connect: {e}", maybe_applied=False)
    return Unavailable(f"{what}: {type(e).__name__}: {e}", maybe_applied=write)


def _query(selector: Selector, **more: Any) -> dict[str, Any]:
    query = {"fieldSelector": selector.fields, "labelSelector": selector.labels, **more}
    return {k: v for k, v in query.items() if v}


class HttpVerbs:
    """The verbs of `recall.kube.verbs` over one API client, with its timeouts."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        timeout: float = 15.0,
        watch_seconds: int = 300,
        clock: Clock = SYSTEM,
    ) -> None:
        self.api = api
        self.clock = clock
        self.timeout = timeout
        self.watch_seconds = watch_seconds
        self.latency = faults.latency()  # tests only: a slow API server

    def _call(
        self,
        what: str,
        fn: Callable[..., T],
        *args: Any,
        write: bool,
        timeout: float | None = None,
        retry: Backoff | None = THROTTLE,
        **kw: Any,
    ) -> T:
        """`fn` within the request's time, its failures typed, a 429 retried (module contract)."""
        if self.latency:
            self.clock.sleep(self.latency)
        deadline = self.clock.monotonic() + (timeout or self.timeout)
        retries = 0
        while True:
            left = deadline - self.clock.monotonic()
            try:
                return fn(*args, _request_timeout=max(0.05, left), **kw)
            except (ApiException, *TRANSPORT) as e:
                error = translate(e, what, write=write)
                if not (isinstance(error, Unavailable) and error.throttled):
                    raise error from e
                # A 429 was turned away before it ran: any verb, a write too, may be resent.
                metrics.API_THROTTLED.labels(verb=what.split(" ", 1)[0]).inc()
                if retry is None or retry.exhausted(retries):
                    raise error from e
                wait = retry_pause(error, retry.delay(retries))
                if self.clock.monotonic() + wait >= deadline:
                    raise error from e
                self.clock.sleep(wait)
                retries += 1

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        _request_timeout: Any = None,
        stream: bool = False,
    ) -> Any:
        """One HTTP request; the decoded JSON answer (the open response with `stream`)."""
        request = self.api.param_serialize(
            method,
            path,
            query_params=list((query or {}).items()),
            header_params={"Accept": "application/json", "Content-Type": content_type},
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api.call_api(*request, _request_timeout=_request_timeout)
        if stream and 200 <= response.status <= 299:
            return response
        data = response.read()
        if not 200 <= response.status <= 299:
            raise ApiException(http_resp=response)
        return json.loads(data) if data else {}

    def _request(self, what: str, method: str, path: str, **kw: Any) -> RawObject:
        out: RawObject = self._call(what, self._send, method, path, **kw)
        return out

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
        what = describe("get", resource, namespace, name, subresource)
        path = resource.path(namespace, name, subresource)
        try:
            return self._request(what, "GET", path, write=False, timeout=timeout, retry=retry)
        except NotFound:
            return None

    def list(
        self,
        resource: Resource,
        namespace: str | None,
        selector: Selector = EVERYTHING,
        *,
        limit: int | None = None,
        continue_from: str | None = None,
    ) -> Page:
        out = self._request(
            describe("list", resource, namespace),
            "GET",
            resource.path(namespace),
            write=False,
            query=_query(selector, limit=limit, **{"continue": continue_from}),
        )
        meta = out.get("metadata") or {}
        return Page(
            items=list(out.get("items") or []),
            resource_version=str(meta.get("resourceVersion") or ""),
            next=meta.get("continue") or None,
        )

    def watch(
        self,
        resource: Resource,
        namespace: str | None,
        resource_version: str,
        selector: Selector = EVERYTHING,
    ) -> Iterator[WatchEvent]:
        what = describe("watch", resource, namespace)
        query = _query(
            selector,
            watch="true",
            resourceVersion=resource_version,
            timeoutSeconds=self.watch_seconds,
            allowWatchBookmarks="true",
        )
        try:
            response = self._send(
                "GET",
                resource.path(namespace),
                query=query,
                _request_timeout=(self.timeout, min(self.watch_seconds + 30, WATCH_READ_SECONDS)),
                stream=True,
            )
        except (ApiException, *TRANSPORT) as e:
            raise translate(e, what, write=False) from e
        try:
            for line in iter_resp_lines(response.response):
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, obj = event["type"], event["object"]
                if kind == "ERROR":
                    code = int(obj.get("code") or 500) if isinstance(obj, dict) else 500
                    message = obj.get("message", "") if isinstance(obj, dict) else str(obj)
                    if code == 410:
                        raise Conflict(f"{what}: {message}", status=410)
                    raise Unavailable(f"{what}: {code} {message}", status=code)
                yield WatchEvent(kind, obj)
        except urllib3.exceptions.ReadTimeoutError:
            return  # silent for WATCH_READ_SECONDS: maybe half-open; the caller watches again
        except (ApiException, *TRANSPORT) as e:
            raise translate(e, what, write=False) from e
        finally:
            response.response.close()
            response.response.release_conn()

    def create(self, resource: Resource, namespace: str | None, body: RawObject) -> RawObject:
        name = (body.get("metadata") or {}).get("name") or "?"
        what = describe("create", resource, namespace, name)
        return self._request(what, "POST", resource.path(namespace), write=True, body=body)

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
        what = describe("update", resource, namespace, name, subresource)
        path = resource.path(namespace, name, subresource)
        return self._request(what, "PUT", path, write=True, body=body, timeout=timeout, retry=retry)

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
        what = describe("patch", resource, namespace, name, subresource)
        return self._request(
            what,
            "PATCH",
            resource.path(namespace, name, subresource),
            write=True,
            body=patch,
            content_type=JSON_PATCH if isinstance(patch, list) else MERGE_PATCH,
            timeout=timeout,
            retry=retry,
        )

    def delete(self, resource: Resource, namespace: str | None, name: str) -> bool:
        what = describe("delete", resource, namespace, name)
        body = {"propagationPolicy": "Background"}
        try:
            self._request(what, "DELETE", resource.path(namespace, name), write=True, body=body)
        except NotFound:
            return False
        return True

    def delete_collection(self, resource: Resource, namespace: str, selector: Selector) -> None:
        """One request; a Batch of 100,000 jobs takes the API server a while, hence the long
        timeout (a retry after a timeout deletes what is left)."""
        self._request(
            describe("deletecollection", resource, namespace),
            "DELETE",
            resource.path(namespace),
            write=True,
            query=_query(selector),
            body={"propagationPolicy": "Background"},
            timeout=max(self.timeout, 600.0),
        )

    def served_plurals(self) -> frozenset[str]:
        """The resources discovery serves in recall.dev/v1alpha1 now; empty while the group is
        not served (CRDs missing, or a just-started API server has not installed their paths)."""
        try:
            out = self._request(
                f"discover {GROUP}/{VERSION}", "GET", f"/apis/{GROUP}/{VERSION}", write=False
            )
        except NotFound:
            return frozenset()
        return frozenset(
            str(r.get("name")) for r in out.get("resources") or [] if "/" not in str(r.get("name"))
        )
