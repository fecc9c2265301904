"""`KubeStore`: the store backed by the API server, through the official `kubernetes` client.

This is the only module of the runtime that calls the client. Every request carries the
timeout from `ApiSettings`; every failure becomes one of the typed errors of
`recall.store.base` (see there for what each means), so no caller looks at HTTP statuses.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from recall.models import BATCH_PLURAL, GROUP, JOB_PLURAL, VERSION, Batch, TranscriptionJob
from recall.store.base import (
    EVERYTHING,
    ConfigMapData,
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    ObjectRef,
    Owner,
    Page,
    RawObject,
    Selector,
    StoreError,
    TooLarge,
    Unavailable,
    WatchEvent,
)

MERGE_PATCH = "application/merge-patch+json"
COMPONENT = "recall"
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
            # The client raises this for a watch's ERROR event itself: list again.
            return Conflict(text, status=status)
        if status in (400, 422):
            return Invalid(text, status=status)
        if status == 403:
            return Forbidden(text, status=status)
        if status == 413 or "too large" in text.lower():
            return TooLarge(text, status=status)
        if status == 0 and e.reason:  # the client wraps some transport errors this way
            return Unavailable(f"{what}: {e.reason}", maybe_applied=write)
        # 401 (a rotated token), 429, 5xx: worth retrying. A 5xx may come after the commit.
        return Unavailable(text, status=status, maybe_applied=write and status >= 500)
    if isinstance(e, NOT_SENT):
        return Unavailable(f"{what}: cannot connect: {e}", maybe_applied=False)
    return Unavailable(f"{what}: {type(e).__name__}: {e}", maybe_applied=write)


class KubeStore:
    """Jobs, Batches, ConfigMaps, Events and Leases over one API client."""

    def __init__(
        self, api: client.ApiClient, *, timeout: float = 15.0, watch_seconds: int = 300
    ) -> None:
        self.api = api
        self.timeout = timeout
        self.watch_seconds = watch_seconds
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.coordination = client.CoordinationV1Api(api)

    def _call(
        self,
        what: str,
        fn: Callable[..., T],
        *args: Any,
        write: bool,
        timeout: float | None = None,
        **kw: Any,
    ) -> T:
        try:
            return fn(*args, _request_timeout=timeout or self.timeout, **kw)
        except (ApiException, *TRANSPORT) as e:
            raise translate(e, what, write=write) from e

    # -- TranscriptionJobs -------------------------------------------------------------------

    def get_job(
        self, namespace: str, name: str, *, timeout: float | None = None
    ) -> TranscriptionJob | None:
        try:
            obj = self._call(
                f"get job {namespace}/{name}",
                self.custom.get_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                JOB_PLURAL,
                name,
                write=False,
                timeout=timeout,
            )
        except NotFound:
            return None
        return TranscriptionJob.from_api(obj)

    def list_jobs(
        self,
        namespace: str | None,
        selector: Selector = EVERYTHING,
        *,
        limit: int | None = None,
        continue_from: str | None = None,
    ) -> Page:
        return self._list(JOB_PLURAL, namespace, selector, limit=limit, continue_from=continue_from)

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

    def watch_jobs(
        self, namespace: str | None, resource_version: str, selector: Selector = EVERYTHING
    ) -> Iterator[WatchEvent]:
        """Events after `resource_version` until the server ends the watch (`watch_seconds`).

        Raises `Conflict` with status 410 when `resource_version` is too old (list again).
        """
        kw: dict[str, Any] = {
            "resource_version": resource_version,
            "timeout_seconds": self.watch_seconds,
            "allow_watch_bookmarks": True,
            "_request_timeout": (self.timeout, self.watch_seconds + 30),
        }
        if selector.fields:
            kw["field_selector"] = selector.fields
        if selector.labels:
            kw["label_selector"] = selector.labels
        if namespace:
            func: Callable[..., Any] = self.custom.list_namespaced_custom_object
            args: tuple[str, ...] = (GROUP, VERSION, namespace, JOB_PLURAL)
        else:
            func = self.custom.list_cluster_custom_object
            args = (GROUP, VERSION, JOB_PLURAL)
        w = watch.Watch()
        try:
            for event in w.stream(func, *args, **kw):
                kind = event["type"]
                obj = event["object"]
                if kind == "ERROR":
                    code = int(obj.get("code") or 500) if isinstance(obj, dict) else 500
                    message = obj.get("message", "") if isinstance(obj, dict) else str(obj)
                    if code == 410:
                        raise Conflict(f"watch jobs: {message}", status=410)
                    raise Unavailable(f"watch jobs: {code} {message}", status=code)
                yield WatchEvent(kind, obj)
        except (ApiException, *TRANSPORT) as e:
            raise translate(e, "watch jobs", write=False) from e
        finally:
            w.stop()

    def create_job(self, namespace: str, manifest: RawObject) -> TranscriptionJob:
        name = manifest.get("metadata", {}).get("name", "?")
        obj = self._call(
            f"create job {namespace}/{name}",
            self.custom.create_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            JOB_PLURAL,
            manifest,
            write=True,
        )
        return TranscriptionJob.from_api(obj)

    def patch_job_status(
        self,
        namespace: str,
        name: str,
        resource_version: str | None,
        patch: RawObject,
        *,
        timeout: float | None = None,
    ) -> TranscriptionJob:
        body: RawObject = {"status": patch}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        obj = self._call(
            f"patch status of job {namespace}/{name}",
            self.custom.patch_namespaced_custom_object_status,
            GROUP,
            VERSION,
            namespace,
            JOB_PLURAL,
            name,
            body,
            write=True,
            timeout=timeout,
            _content_type=MERGE_PATCH,
        )
        return TranscriptionJob.from_api(obj)

    def patch_job_labels(
        self, namespace: str, name: str, labels: dict[str, str | None]
    ) -> TranscriptionJob:
        obj = self._call(
            f"label job {namespace}/{name}",
            self.custom.patch_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            JOB_PLURAL,
            name,
            {"metadata": {"labels": labels}},
            write=True,
            _content_type=MERGE_PATCH,
        )
        return TranscriptionJob.from_api(obj)

    def delete_job(self, namespace: str, name: str) -> bool:
        try:
            self._call(
                f"delete job {namespace}/{name}",
                self.custom.delete_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                JOB_PLURAL,
                name,
                write=True,
                propagation_policy="Background",
            )
        except NotFound:
            return False
        return True

    def delete_jobs(self, namespace: str, labels: str) -> None:
        self._call(
            f"delete jobs {labels} in {namespace}",
            self.custom.delete_collection_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            JOB_PLURAL,
            write=True,
            label_selector=labels,
            propagation_policy="Background",
        )

    # -- Batches -----------------------------------------------------------------------------

    def get_batch(self, namespace: str, name: str) -> Batch | None:
        try:
            obj = self._call(
                f"get batch {namespace}/{name}",
                self.custom.get_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                BATCH_PLURAL,
                name,
                write=False,
            )
        except NotFound:
            return None
        return Batch.from_api(obj)

    def list_batches(self, namespace: str | None) -> list[Batch]:
        page = self._list(BATCH_PLURAL, namespace, Selector())
        return [Batch.from_api(o) for o in page.items]

    def create_batch(self, namespace: str, manifest: RawObject) -> Batch:
        name = manifest.get("metadata", {}).get("name", "?")
        obj = self._call(
            f"create batch {namespace}/{name}",
            self.custom.create_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            BATCH_PLURAL,
            manifest,
            write=True,
        )
        return Batch.from_api(obj)

    def patch_batch_status(
        self, namespace: str, name: str, resource_version: str | None, patch: RawObject
    ) -> Batch:
        body: RawObject = {"status": patch}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        obj = self._call(
            f"patch status of batch {namespace}/{name}",
            self.custom.patch_namespaced_custom_object_status,
            GROUP,
            VERSION,
            namespace,
            BATCH_PLURAL,
            name,
            body,
            write=True,
            _content_type=MERGE_PATCH,
        )
        return Batch.from_api(obj)

    # -- Events ------------------------------------------------------------------------------

    def post_event(self, about: ObjectRef, type_: str, reason: str, message: str) -> None:
        now = dt.datetime.now(dt.UTC)
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{about.name}.", namespace=about.namespace),
            involved_object=client.V1ObjectReference(
                api_version=about.api_version,
                kind=about.kind,
                name=about.name,
                namespace=about.namespace,
                uid=about.uid,
            ),
            reason=reason,
            message=message[:1024],
            type=type_,
            count=1,
            first_timestamp=now,
            last_timestamp=now,
            source=client.V1EventSource(component=COMPONENT),
            reporting_component=COMPONENT,
            reporting_instance=os.environ.get("POD_NAME") or COMPONENT,
        )
        self._call(
            f"post event {reason} on {about.kind} {about.name}",
            self.core.create_namespaced_event,
            about.namespace,
            body,
            write=True,
        )

    def list_events(self, namespace: str, about: ObjectRef | None = None) -> list[RawObject]:
        kw: dict[str, Any] = {}
        if about is not None:
            kw["field_selector"] = (
                f"involvedObject.kind={about.kind},involvedObject.name={about.name}"
            )
        out = self._call(
            f"list events in {namespace}",
            self.core.list_namespaced_event,
            namespace,
            write=False,
            **kw,
        )
        items: list[RawObject] = self.api.sanitize_for_serialization(out.items)
        return items

    # -- Leases ------------------------------------------------------------------------------

    def get_lease(self, namespace: str, name: str) -> RawObject | None:
        try:
            obj = self._call(
                f"get lease {namespace}/{name}",
                self.coordination.read_namespaced_lease,
                name,
                namespace,
                write=False,
            )
        except NotFound:
            return None
        out: RawObject = self.api.sanitize_for_serialization(obj)
        return out

    def create_lease(self, namespace: str, body: RawObject) -> RawObject:
        obj = self._call(
            f"create lease {namespace}/{body['metadata']['name']}",
            self.coordination.create_namespaced_lease,
            namespace,
            body,
            write=True,
        )
        out: RawObject = self.api.sanitize_for_serialization(obj)
        return out

    def replace_lease(self, namespace: str, name: str, body: RawObject) -> RawObject:
        obj = self._call(
            f"update lease {namespace}/{name}",
            self.coordination.replace_namespaced_lease,
            name,
            namespace,
            body,
            write=True,
        )
        out: RawObject = self.api.sanitize_for_serialization(obj)
        return out

    # -- ConfigMaps --------------------------------------------------------------------------

    def get_config_map(self, namespace: str, name: str) -> ConfigMapData | None:
        try:
            cm = self._call(
                f"get configmap {namespace}/{name}",
                self.core.read_namespaced_config_map,
                name,
                namespace,
                write=False,
            )
        except NotFound:
            return None
        return ConfigMapData(
            name=name,
            data=dict(cm.data or {}),
            labels=dict(cm.metadata.labels or {}),
            resource_version=cm.metadata.resource_version,
        )

    def create_config_map(
        self,
        namespace: str,
        name: str,
        data: dict[str, str],
        *,
        labels: dict[str, str],
        owner: Owner | None = None,
        immutable: bool = False,
    ) -> None:
        meta = client.V1ObjectMeta(name=name, namespace=namespace, labels=labels)
        if owner is not None:
            meta.owner_references = [
                client.V1OwnerReference(
                    api_version=owner.api_version,
                    kind=owner.kind,
                    name=owner.name,
                    uid=owner.uid,
                    controller=True,
                    block_owner_deletion=False,
                )
            ]
        body = client.V1ConfigMap(metadata=meta, data=data, immutable=immutable or None)
        self._call(
            f"create configmap {namespace}/{name}",
            self.core.create_namespaced_config_map,
            namespace,
            body,
            write=True,
        )

    def patch_config_map(self, namespace: str, name: str, data: dict[str, str]) -> None:
        self._call(
            f"patch configmap {namespace}/{name}",
            self.core.patch_namespaced_config_map,
            name,
            namespace,
            {"data": data},
            write=True,
            _content_type=MERGE_PATCH,
        )

    def own_config_map(self, namespace: str, name: str, owner: Owner) -> None:
        ref = {
            "apiVersion": owner.api_version,
            "kind": owner.kind,
            "name": owner.name,
            "uid": owner.uid,
            "controller": True,
            "blockOwnerDeletion": False,
        }
        self._call(
            f"set the owner of configmap {namespace}/{name}",
            self.core.patch_namespaced_config_map,
            name,
            namespace,
            {"metadata": {"ownerReferences": [ref]}},
            write=True,
            _content_type=MERGE_PATCH,
        )

    def delete_config_map(self, namespace: str, name: str) -> bool:
        try:
            self._call(
                f"delete configmap {namespace}/{name}",
                self.core.delete_namespaced_config_map,
                name,
                namespace,
                write=True,
            )
        except NotFound:
            return False
        return True

    def list_config_maps(self, namespace: str, labels: str) -> list[ConfigMapData]:
        out = self._call(
            f"list configmaps in {namespace}",
            self.core.list_namespaced_config_map,
            namespace,
            write=False,
            label_selector=labels,
        )
        return [
            ConfigMapData(
                name=cm.metadata.name,
                data=dict(cm.data or {}),
                labels=dict(cm.metadata.labels or {}),
                resource_version=cm.metadata.resource_version,
            )
            for cm in out.items
        ]
