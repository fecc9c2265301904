"""The worker-fleet half of `KubeStore`: the Deployment, its scale subresource, its pods, and the
autoscalers that may already target it (HorizontalPodAutoscalers, KEDA ScaledObjects).

A scale write is a merge patch of `deployments/scale` that carries `metadata.resourceVersion`
when given: the API server applies it only if the Deployment is still at that version (its
spec, its status, its metadata: anything), else 409 — the same fence as the lease writes.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from kubernetes import client

from recall.kube.base import NotFound, RawObject, Scale, ScalerRef
from recall.kube.client import MERGE_PATCH, KubeClient

KEDA_GROUP, KEDA_VERSION, KEDA_SCALED_OBJECTS = "keda.sh", "v1alpha1", "scaledobjects"


def _scale(obj: Any) -> Scale:
    return Scale(
        replicas=int(obj.spec.replicas or 0),
        status_replicas=int(obj.status.replicas or 0),
        selector=str(obj.status.selector or ""),
        resource_version=str(obj.metadata.resource_version or ""),
    )


class KubeApps(KubeClient):
    @cached_property
    def apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.api)

    @cached_property
    def autoscaling(self) -> client.AutoscalingV2Api:
        return client.AutoscalingV2Api(self.api)

    # -- the Deployment ----------------------------------------------------------------------

    def get_deployment(self, namespace: str, name: str) -> RawObject | None:
        try:
            obj = self._call(
                f"get deployment {namespace}/{name}",
                self.apps.read_namespaced_deployment,
                name,
                namespace,
                write=False,
            )
        except NotFound:
            return None
        out: RawObject = self.api.sanitize_for_serialization(obj)
        return out

    def list_deployments(self, namespace: str, labels: str) -> list[RawObject]:
        out = self._call(
            f"list deployments in {namespace}",
            self.apps.list_namespaced_deployment,
            namespace,
            write=False,
            label_selector=labels,
        )
        items: list[RawObject] = self.api.sanitize_for_serialization(out.items)
        return items

    def patch_deployment_annotations(
        self, namespace: str, name: str, annotations: dict[str, str | None]
    ) -> None:
        self._call(
            f"annotate deployment {namespace}/{name}",
            self.apps.patch_namespaced_deployment,
            name,
            namespace,
            {"metadata": {"annotations": annotations}},
            write=True,
            _content_type=MERGE_PATCH,
        )

    # -- its scale subresource ---------------------------------------------------------------

    def get_scale(self, namespace: str, name: str) -> Scale | None:
        try:
            obj = self._call(
                f"get scale of deployment {namespace}/{name}",
                self.apps.read_namespaced_deployment_scale,
                name,
                namespace,
                write=False,
            )
        except NotFound:
            return None
        return _scale(obj)

    def patch_scale(
        self, namespace: str, name: str, replicas: int, resource_version: str | None
    ) -> Scale:
        body: RawObject = {"spec": {"replicas": replicas}}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        obj = self._call(
            f"scale deployment {namespace}/{name} to {replicas}",
            self.apps.patch_namespaced_deployment_scale,
            name,
            namespace,
            body,
            write=True,
            _content_type=MERGE_PATCH,
        )
        return _scale(obj)

    # -- whoever else scales it --------------------------------------------------------------

    def list_autoscalers(self, namespace: str) -> list[ScalerRef]:
        hpas = self._call(
            f"list horizontalpodautoscalers in {namespace}",
            self.autoscaling.list_namespaced_horizontal_pod_autoscaler,
            namespace,
            write=False,
        )
        found = [
            ScalerRef(
                "HorizontalPodAutoscaler",
                h.metadata.name,
                h.spec.scale_target_ref.kind,
                h.spec.scale_target_ref.name,
            )
            for h in hpas.items
        ]
        try:
            scaled: dict[str, Any] = self._call(
                f"list scaledobjects in {namespace}",
                self.custom.list_namespaced_custom_object,
                KEDA_GROUP,
                KEDA_VERSION,
                namespace,
                KEDA_SCALED_OBJECTS,
                write=False,
            )
        except NotFound:
            return found  # KEDA is not installed
        for so in scaled.get("items") or []:
            target = (so.get("spec") or {}).get("scaleTargetRef") or {}
            found.append(
                ScalerRef(
                    "ScaledObject",
                    str((so.get("metadata") or {}).get("name") or ""),
                    str(target.get("kind") or "Deployment"),
                    str(target.get("name") or ""),
                )
            )
        return found

    # -- its pods ----------------------------------------------------------------------------

    def list_pods(self, namespace: str, labels: str) -> list[RawObject]:
        out = self._call(
            f"list pods in {namespace}",
            self.core.list_namespaced_pod,
            namespace,
            write=False,
            label_selector=labels,
        )
        items: list[RawObject] = self.api.sanitize_for_serialization(out.items)
        return items

    def patch_pod_annotations(
        self, namespace: str, name: str, annotations: dict[str, str | None]
    ) -> None:
        self._call(
            f"annotate pod {namespace}/{name}",
            self.core.patch_namespaced_pod,
            name,
            namespace,
            {"metadata": {"annotations": annotations}},
            write=True,
            _content_type=MERGE_PATCH,
        )
