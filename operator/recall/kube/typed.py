"""The typed calls of the runtime, each a thin wrapper of one generic verb (`recall.kube.verbs`).

`TypedClient(verbs)` is the same code over the API server and the in-memory twin: it names the
resource, shapes the body and types the answer, nothing more. What every call guarantees is in
`recall.kube.base`; the few calls with more to say say it here.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator, Mapping

from recall.base.backoff import Backoff
from recall.base.clock import SYSTEM, Clock
from recall.kube.base import (
    EVERYTHING,
    THROTTLE,
    ConfigMapData,
    NotFound,
    ObjectRef,
    Owner,
    Page,
    RawObject,
    Scale,
    ScalerRef,
    Selector,
    WatchEvent,
)
from recall.kube.verbs import (
    BATCHES,
    CONFIG_MAPS,
    DEPLOYMENTS,
    EVENTS,
    HPAS,
    JOBS,
    LEASES,
    PODS,
    SCALED_OBJECTS,
    SECRETS,
    Verbs,
)
from recall.resources import Batch, TranscriptionJob

COMPONENT = "recall"


def _at(resource_version: str | None, body: RawObject) -> RawObject:
    """`body` applied only at `resource_version` (when given)."""
    if resource_version is not None:
        body["metadata"] = {**body.get("metadata", {}), "resourceVersion": resource_version}
    return body


def _config_map(obj: RawObject) -> ConfigMapData:
    meta = obj.get("metadata") or {}
    return ConfigMapData(
        name=str(meta.get("name") or ""),
        data=dict(obj.get("data") or {}),
        resource_version=meta.get("resourceVersion"),
    )


def _scale(obj: RawObject) -> Scale:
    return Scale(
        replicas=int((obj.get("spec") or {}).get("replicas") or 0),
        selector=str((obj.get("status") or {}).get("selector") or ""),
        resource_version=str((obj.get("metadata") or {}).get("resourceVersion") or ""),
    )


def _scaler(kind: str, obj: RawObject) -> ScalerRef:
    target = (obj.get("spec") or {}).get("scaleTargetRef") or {}
    return ScalerRef(
        kind,
        str((obj.get("metadata") or {}).get("name") or ""),
        str(target.get("kind") or "Deployment"),
        str(target.get("name") or ""),
    )


class TypedClient:
    """Jobs, Batches, Events, Leases, ConfigMaps, Secrets and the worker fleet over `verbs`."""

    def __init__(self, verbs: Verbs, *, clock: Clock = SYSTEM) -> None:
        self.verbs = verbs
        self.clock = clock

    def get_job(
        self,
        namespace: str,
        name: str,
        *,
        timeout: float | None = None,
        retry: Backoff | None = THROTTLE,
    ) -> TranscriptionJob | None:
        obj = self.verbs.get(JOBS, namespace, name, timeout=timeout, retry=retry)
        return None if obj is None else TranscriptionJob.from_api(obj)

    def list_jobs(
        self,
        namespace: str | None,
        selector: Selector = EVERYTHING,
        *,
        limit: int | None = None,
        continue_from: str | None = None,
    ) -> Page:
        return self.verbs.list(JOBS, namespace, selector, limit=limit, continue_from=continue_from)

    def watch_jobs(
        self, namespace: str | None, resource_version: str, selector: Selector = EVERYTHING
    ) -> Iterator[WatchEvent]:
        return self.verbs.watch(JOBS, namespace, resource_version, selector)

    def create_job(self, namespace: str, manifest: RawObject) -> TranscriptionJob:
        return TranscriptionJob.from_api(self.verbs.create(JOBS, namespace, manifest))

    def patch_job_status(
        self,
        namespace: str,
        name: str,
        resource_version: str | None,
        patch: RawObject,
        *,
        timeout: float | None = None,
        retry: Backoff | None = THROTTLE,
    ) -> TranscriptionJob:
        body = _at(resource_version, {"status": patch})
        obj = self.verbs.patch(
            JOBS, namespace, name, body, subresource="status", timeout=timeout, retry=retry
        )
        return TranscriptionJob.from_api(obj)

    def replace_job_status(
        self,
        namespace: str,
        name: str,
        resource_version: str,
        status: RawObject,
        *,
        timeout: float | None = None,
        retry: Backoff | None = THROTTLE,
    ) -> TranscriptionJob:
        """PUT the whole status, applied only at `resource_version` (a compare-and-swap): for
        claims, publish records and the operator's other fenced status writes. The lease
        holder's writes are merge patches, so API Priority and Fairness tells them apart."""
        # The status subresource takes a whole object and keeps all but its status.
        body: RawObject = {
            "apiVersion": JOBS.api_version,
            "kind": JOBS.kind,
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": resource_version},
            "status": status,
        }
        obj = self.verbs.replace(
            JOBS, namespace, name, body, subresource="status", timeout=timeout, retry=retry
        )
        return TranscriptionJob.from_api(obj)

    def patch_job_labels(
        self, namespace: str, name: str, labels: dict[str, str | None]
    ) -> TranscriptionJob:
        obj = self.verbs.patch(JOBS, namespace, name, {"metadata": {"labels": labels}})
        return TranscriptionJob.from_api(obj)

    def delete_job(self, namespace: str, name: str) -> bool:
        return self.verbs.delete(JOBS, namespace, name)

    def delete_jobs(self, namespace: str, labels: str) -> None:
        """Delete every job of `namespace` that the label selector selects."""
        self.verbs.delete_collection(JOBS, namespace, Selector(labels=labels))

    def get_batch(self, namespace: str, name: str) -> Batch | None:
        obj = self.verbs.get(BATCHES, namespace, name)
        return None if obj is None else Batch.from_api(obj)

    def list_batches(self, namespace: str | None) -> list[Batch]:
        return [Batch.from_api(o) for o in self.verbs.list(BATCHES, namespace).items]

    def create_batch(self, namespace: str, manifest: RawObject) -> Batch:
        return Batch.from_api(self.verbs.create(BATCHES, namespace, manifest))

    def patch_batch_status(
        self, namespace: str, name: str, resource_version: str | None, patch: RawObject
    ) -> Batch:
        body = _at(resource_version, {"status": patch})
        return Batch.from_api(
            self.verbs.patch(BATCHES, namespace, name, body, subresource="status")
        )

    def post_event(self, about: ObjectRef, type_: str, reason: str, message: str) -> None:
        now = self.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        involved = {
            "apiVersion": about.api_version,
            "kind": about.kind,
            "name": about.name,
            "namespace": about.namespace,
        }
        if about.uid is not None:
            involved["uid"] = about.uid
        body: RawObject = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{about.name}.", "namespace": about.namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message[:1024],
            "type": type_,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": os.environ.get("POD_NAME") or COMPONENT,
        }
        self.verbs.create(EVENTS, about.namespace, body)

    def list_events(self, namespace: str, about: ObjectRef | None = None) -> list[RawObject]:
        fields = None
        if about is not None:
            fields = f"involvedObject.kind={about.kind},involvedObject.name={about.name}"
        return self.verbs.list(EVENTS, namespace, Selector(fields=fields)).items

    def get_lease(self, namespace: str, name: str) -> RawObject | None:
        return self.verbs.get(LEASES, namespace, name)

    def create_lease(self, namespace: str, body: RawObject) -> RawObject:
        return self.verbs.create(LEASES, namespace, body)

    def replace_lease(self, namespace: str, name: str, body: RawObject) -> RawObject:
        return self.verbs.replace(LEASES, namespace, name, body)

    def delete_lease(self, namespace: str, name: str) -> bool:
        return self.verbs.delete(LEASES, namespace, name)

    def list_leases(
        self,
        namespace: str | None,
        labels: str,
        *,
        limit: int | None = None,
        continue_from: str | None = None,
    ) -> Page:
        return self.verbs.list(
            LEASES, namespace, Selector(labels=labels), limit=limit, continue_from=continue_from
        )

    def get_config_map(self, namespace: str, name: str) -> ConfigMapData | None:
        obj = self.verbs.get(CONFIG_MAPS, namespace, name)
        return None if obj is None else _config_map(obj)

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
        meta: RawObject = {"name": name, "namespace": namespace, "labels": labels}
        if owner is not None:
            meta["ownerReferences"] = [owner.reference()]
        body: RawObject = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}
        if immutable:
            body["immutable"] = True
        self.verbs.create(CONFIG_MAPS, namespace, body)

    def patch_config_map(
        self,
        namespace: str,
        name: str,
        data: Mapping[str, str | None],
        *,
        resource_version: str | None = None,
    ) -> None:
        """A merge patch of the ConfigMap's data (None removes a key); with `resource_version`,
        applied only at that version (a 409 `Conflict` otherwise)."""
        body = _at(resource_version, {"data": dict(data)})
        self.verbs.patch(CONFIG_MAPS, namespace, name, body)

    def own_config_map(self, namespace: str, name: str, owner: Owner) -> None:
        """Make `owner` the ConfigMap's owner (garbage-collected with it)."""
        patch = {"metadata": {"ownerReferences": [owner.reference()]}}
        self.verbs.patch(CONFIG_MAPS, namespace, name, patch)

    def list_config_maps(self, namespace: str, labels: str) -> list[ConfigMapData]:
        page = self.verbs.list(CONFIG_MAPS, namespace, Selector(labels=labels))
        return [_config_map(o) for o in page.items]

    def get_secret(self, namespace: str, name: str) -> dict[str, bytes] | None:
        """A Secret's data (decoded), None when it does not exist. The operator reads only the
        keys of its event sinks (recall.operator.notify)."""
        secret = self.verbs.get(SECRETS, namespace, name)
        if secret is None:
            return None
        return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}

    def get_deployment(self, namespace: str, name: str) -> RawObject | None:
        return self.verbs.get(DEPLOYMENTS, namespace, name)

    def list_deployments(self, namespace: str, labels: str) -> list[RawObject]:
        return self.verbs.list(DEPLOYMENTS, namespace, Selector(labels=labels)).items

    def patch_deployment_annotations(
        self, namespace: str, name: str, annotations: dict[str, str | None]
    ) -> None:
        self.verbs.patch(DEPLOYMENTS, namespace, name, {"metadata": {"annotations": annotations}})

    def get_scale(self, namespace: str, name: str) -> Scale | None:
        """The Deployment's scale, or None when there is no such Deployment."""
        obj = self.verbs.get(DEPLOYMENTS, namespace, name, subresource="scale")
        return None if obj is None else _scale(obj)

    def patch_scale(
        self, namespace: str, name: str, replicas: int, resource_version: str | None
    ) -> Scale:
        """Ask for `replicas` through the scale subresource (a merge patch); with
        `resource_version`, applied only while the Deployment is still at that version (any
        change to it counts), else `Conflict`."""
        body = _at(resource_version, {"spec": {"replicas": replicas}})
        return _scale(self.verbs.patch(DEPLOYMENTS, namespace, name, body, subresource="scale"))

    def list_autoscalers(self, namespace: str) -> list[ScalerRef]:
        """The HPAs and ScaledObjects of `namespace` (none when KEDA is not installed)."""
        found = [_scaler(HPAS.kind, h) for h in self.verbs.list(HPAS, namespace).items]
        try:
            scaled = self.verbs.list(SCALED_OBJECTS, namespace).items
        except NotFound:
            return found  # KEDA is not installed
        return found + [_scaler(SCALED_OBJECTS.kind, so) for so in scaled]

    def list_pods(self, namespace: str, labels: str) -> list[RawObject]:
        return self.verbs.list(PODS, namespace, Selector(labels=labels)).items

    def patch_pod_annotations(
        self, namespace: str, name: str, annotations: dict[str, str | None]
    ) -> None:
        self.verbs.patch(PODS, namespace, name, {"metadata": {"annotations": annotations}})


# What the runtime is given: the one client, over the API server or the twin (`JobApi` where
# a caller uses only jobs, Batches, Events and Leases).
Api = TypedClient
JobApi = TypedClient
