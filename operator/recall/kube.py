"""All Kubernetes I/O of the lease protocol, in one small module.

`fenced_write` is the only way lease state is written (DESIGN §3):

1. take the job as read at resourceVersion R (the caller's last known copy, or a fresh GET);
2. ask `decide(job)` — a pure function from `recall.lease` — for the new status;
   a `Refusal` ends the write (for a lease holder it means the lease is lost);
3. PATCH `/status` with a JSON merge patch that carries `metadata.resourceVersion: R`;
   the API server applies it only if the object is still at R, else answers 409;
4. on 409, GET the job again and go back to 2: if the lease is still the caller's (someone
   wrote something unrelated), the decision is the same and the write is retried with
   jittered backoff; if not, `decide` refuses. Bounded by `attempts`.

The client is the official `kubernetes` package; every call has a request timeout.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from recall import lease as lease_core
from recall import metrics
from recall.models import BATCH_PLURAL, GROUP, JOB_PLURAL, VERSION, JobStatus, TranscriptionJob

MERGE_PATCH = "application/merge-patch+json"
REQUEST_TIMEOUT = 15.0


class KubeError(RuntimeError):
    """An API call failed in a way the fenced write cannot resolve (not a 409 or 404).

    `transient` is True for answers a retry may fix (429, 5xx) and for transport errors.
    """

    def __init__(self, message: str, *, status: int | None = None, transient: bool = True) -> None:
        super().__init__(message)
        self.status = status
        self.transient = transient


TRANSIENT_STATUS = frozenset({0, 429, 500, 502, 503, 504})
# What a lost connection or a timeout raises from the client.
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (urllib3.exceptions.HTTPError, OSError)


@dataclass(frozen=True)
class Written:
    """The fenced write was applied; `job` is the object as the API server returned it."""

    job: TranscriptionJob
    conflicts: int


@dataclass(frozen=True)
class Refused:
    """`decide` refused on the object read at `job` (None when the job no longer exists)."""

    refusal: lease_core.Refusal
    job: TranscriptionJob | None
    conflicts: int


FencedResult = Written | Refused


def merge_patch(old: Any, new: Any) -> Any:
    """The RFC 7386 merge patch that turns `old` into `new` (keys removed become null)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    patch: dict[str, Any] = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        if key not in old:
            patch[key] = value
        elif old[key] != value:
            patch[key] = merge_patch(old[key], value)
    return patch


def load_api_client(
    kubeconfig: str | Path | None = None, context: str | None = None
) -> client.ApiClient:
    """An API client from the given kubeconfig, $KUBECONFIG, ~/.kube/config, or in-cluster."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        cfg = client.Configuration()
        config.load_incluster_config(client_configuration=cfg)
        return client.ApiClient(cfg)
    cfg = client.Configuration()
    config.load_kube_config(
        config_file=str(path) if path else None, context=context, client_configuration=cfg
    )
    # Many threads (heartbeater, watcher, main loop) share one client.
    cfg.connection_pool_maxsize = 16
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


class Kube:
    """Typed access to TranscriptionJobs, Batches and ConfigMaps over one API client."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)

    # -- TranscriptionJobs -----------------------------------------------------------------

    def get_job(
        self, namespace: str, name: str, timeout: float = REQUEST_TIMEOUT
    ) -> TranscriptionJob | None:
        try:
            obj = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, JOB_PLURAL, name, _request_timeout=timeout
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise KubeError(
                f"get {name}: {e.status} {api_message(e)}",
                status=e.status,
                transient=e.status in TRANSIENT_STATUS,
            ) from e
        return TranscriptionJob.from_api(obj)

    def list_jobs(
        self,
        namespace: str | None,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
    ) -> tuple[list[TranscriptionJob], str]:
        """Jobs and the list's resourceVersion (to start a watch from)."""
        kwargs: dict[str, Any] = {"_request_timeout": REQUEST_TIMEOUT}
        if field_selector:
            kwargs["field_selector"] = field_selector
        if label_selector:
            kwargs["label_selector"] = label_selector
        if namespace:
            out = self.custom.list_namespaced_custom_object(
                GROUP, VERSION, namespace, JOB_PLURAL, **kwargs
            )
        else:
            out = self.custom.list_cluster_custom_object(GROUP, VERSION, JOB_PLURAL, **kwargs)
        jobs = [TranscriptionJob.from_api(o) for o in out.get("items", [])]
        return jobs, str(out["metadata"]["resourceVersion"])

    def watch_jobs(
        self,
        namespace: str | None,
        resource_version: str,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(event type, raw object) from a watch; ends after `timeout_seconds` or on error.

        Raises `ApiException(410)` when `resource_version` is too old (re-list then).
        """
        w = watch.Watch()
        kwargs: dict[str, Any] = {
            "resource_version": resource_version,
            "timeout_seconds": timeout_seconds,
            "allow_watch_bookmarks": True,
            "_request_timeout": timeout_seconds + 30,
        }
        if field_selector:
            kwargs["field_selector"] = field_selector
        if label_selector:
            kwargs["label_selector"] = label_selector
        if namespace:
            func: Callable[..., Any] = self.custom.list_namespaced_custom_object
            args: tuple[str, ...] = (GROUP, VERSION, namespace, JOB_PLURAL)
        else:
            func = self.custom.list_cluster_custom_object
            args = (GROUP, VERSION, JOB_PLURAL)
        try:
            for event in w.stream(func, *args, **kwargs):
                yield event["type"], event["object"]
        finally:
            w.stop()

    def create_job(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = self.custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, JOB_PLURAL, body, _request_timeout=REQUEST_TIMEOUT
        )
        return out

    def patch_job_status(
        self,
        namespace: str,
        name: str,
        resource_version: str,
        status_patch: dict[str, Any],
        timeout: float = REQUEST_TIMEOUT,
    ) -> TranscriptionJob:
        """One merge patch of `/status`, applied only at `resource_version` (else 409)."""
        body = {"metadata": {"resourceVersion": resource_version}, "status": status_patch}
        obj = self.custom.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            namespace,
            JOB_PLURAL,
            name,
            body,
            _content_type=MERGE_PATCH,
            _request_timeout=timeout,
        )
        return TranscriptionJob.from_api(obj)

    # -- Batches ---------------------------------------------------------------------------

    def get_batch(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            out: dict[str, Any] = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, BATCH_PLURAL, name, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return out

    # -- ConfigMaps ------------------------------------------------------------------------

    def get_config_map(self, namespace: str, name: str) -> client.V1ConfigMap | None:
        try:
            cm: client.V1ConfigMap = self.core.read_namespaced_config_map(
                name, namespace, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return cm

    def apply_config_map(
        self,
        namespace: str,
        name: str,
        data: dict[str, str],
        *,
        labels: dict[str, str],
        owner: TranscriptionJob | None = None,
    ) -> None:
        """Create the ConfigMap, or replace its data if it exists."""
        meta = client.V1ObjectMeta(name=name, namespace=namespace, labels=labels)
        if owner is not None and owner.metadata.uid:
            meta.owner_references = [owner_reference(owner)]
        body = client.V1ConfigMap(metadata=meta, data=data)
        try:
            self.core.create_namespaced_config_map(
                namespace, body, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as e:
            if e.status != 409:
                raise
            self.core.patch_namespaced_config_map(
                name,
                namespace,
                {"data": data},
                _content_type=MERGE_PATCH,
                _request_timeout=REQUEST_TIMEOUT,
            )

    def delete_config_map(self, namespace: str, name: str) -> bool:
        try:
            self.core.delete_namespaced_config_map(
                name, namespace, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        return True


def owner_reference(job: TranscriptionJob) -> client.V1OwnerReference:
    assert job.metadata.uid is not None
    return client.V1OwnerReference(
        api_version=job.api_version,
        kind=job.kind,
        name=job.name,
        uid=job.metadata.uid,
        controller=True,
        block_owner_deletion=False,
    )


Decide = Callable[[TranscriptionJob], lease_core.Decision]


def fenced_write(
    kube: Kube,
    namespace: str,
    name: str,
    decide: Decide,
    *,
    known: TranscriptionJob | None = None,
    attempts: int = 6,
    retry_on_conflict: bool = True,
    action: str = "write",
    timeout: float = REQUEST_TIMEOUT,
    sleep: Callable[[float], None] = time.sleep,
) -> FencedResult:
    """Apply `decide`'s status with a PATCH guarded by the resourceVersion it was decided on.

    Returns `Written` with the updated job, or `Refused` when `decide` refused (on the first
    read or after a conflict re-read). With `retry_on_conflict=False` a 409 is reported as
    `Refused(NOT_QUEUED)` at once (a claim: someone else won). Raises `KubeError` when the
    API keeps answering 409 after `attempts` tries or answers another error; transport errors
    (timeouts, refused connections) propagate as they are. `timeout` bounds each request.
    """
    job = known
    conflicts = 0
    for attempt in range(attempts):
        if job is None:
            job = kube.get_job(namespace, name, timeout=timeout)
            if job is None:
                return Refused(lease_core.Refusal(lease_core.RefusalReason.GONE), None, conflicts)
        decision = decide(job)
        if isinstance(decision, lease_core.Refusal):
            if conflicts:
                metrics.FENCED_REJECTIONS.labels(action=action, reason=decision.reason).inc()
            return Refused(decision, job, conflicts)
        patch = status_patch(job.status, decision)
        try:
            written = kube.patch_job_status(
                namespace, name, job.resource_version, patch, timeout=timeout
            )
        except ApiException as e:
            if e.status == 404:
                return Refused(lease_core.Refusal(lease_core.RefusalReason.GONE), None, conflicts)
            if e.status != 409:
                raise KubeError(
                    f"{action} {namespace}/{name}: {e.status} {api_message(e)}",
                    status=e.status,
                    transient=e.status in TRANSIENT_STATUS,
                ) from e
            conflicts += 1
            metrics.CONFLICTS.labels(action=action).inc()
            if not retry_on_conflict:
                metrics.FENCED_REJECTIONS.labels(action=action, reason="Conflict").inc()
                return Refused(
                    lease_core.Refusal(
                        lease_core.RefusalReason.NOT_QUEUED, "409: another writer won"
                    ),
                    job,
                    conflicts,
                )
            job = None
            # Jittered backoff: 10, 20, 40 ... ms, so two retrying writers drift apart.
            sleep(random.uniform(0.5, 1.0) * 0.01 * 2**attempt)
            continue
        return Written(written, conflicts)
    raise KubeError(f"{action} {namespace}/{name}: still conflicting after {attempts} tries")


def status_patch(old: JobStatus, new: JobStatus) -> dict[str, Any]:
    """Merge patch from one status to another, in the API's JSON form."""
    patch = merge_patch(old.to_api(), new.to_api())
    assert isinstance(patch, dict)
    return patch


def api_message(e: ApiException) -> str:
    """The `message` of a Kubernetes Status error body, or the HTTP reason."""
    import json

    try:
        body = json.loads(e.body or "{}")
    except (TypeError, ValueError):
        return str(e.reason)
    return str(body.get("message") or e.reason)
