"""The worker-fleet half of `MemoryStore`: Deployments with their scale subresource, pods,
and autoscalers, in memory.

What it keeps of the API server: a scale write names the Deployment's resourceVersion and gets
`Conflict` when anything changed since (spec, status or metadata), and bumps the version;
metadata patches bump it too. What it does not model: any controller. No ReplicaSet creates or
removes pods, no kubelet sets readiness: tests do that with `put_pod` / `delete_pod`
(`tests/unit/operator/fleet.py` plays the ReplicaSet, with its choice of which pods go).
"""

from __future__ import annotations

import copy

from recall.kube.base import RawObject, Scale, ScalerRef
from recall.kube.memory_core import MemoryCore, _Kind, _now
from recall.kube.patch import apply_merge_patch, matches_labels


class MemoryApps(MemoryCore):
    def __init__(self, *, watch_seconds: float = 5.0) -> None:
        super().__init__(watch_seconds=watch_seconds)
        self._deployments = _Kind()
        self._pods = _Kind()
        self._autoscalers: list[ScalerRef] = []

    def _fleet(self) -> tuple[_Kind, _Kind, list[ScalerRef]]:
        return self._deployments, self._pods, self._autoscalers

    # -- test controls -----------------------------------------------------------------------

    def put_deployment(
        self,
        namespace: str,
        name: str,
        replicas: int,
        labels: dict[str, str],
        *,
        own_labels: dict[str, str] | None = None,
    ) -> RawObject:
        """Create (or replace) a Deployment whose pods carry `labels` (and it `own_labels`)."""
        deployments, _, _ = self._fleet()
        meta = {"name": name, "namespace": namespace, "generation": 1, "labels": own_labels or {}}
        obj: RawObject = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {"replicas": replicas, "selector": {"matchLabels": dict(labels)}},
            "status": {"observedGeneration": 1, "replicas": replicas, "updatedReplicas": replicas},
        }
        with self._cond:
            return self._replace(deployments, namespace, name, obj, created=True)

    def put_pod(self, namespace: str, pod: RawObject) -> RawObject:
        """Create or replace a pod (as a kubelet and a ReplicaSet would leave it)."""
        _, pods, _ = self._fleet()
        with self._cond:
            name = pod["metadata"]["name"]
            obj = copy.deepcopy(pod)
            obj["metadata"] = {
                "namespace": namespace,
                "creationTimestamp": _now(),
                **obj["metadata"],
            }
            return self._replace(pods, namespace, name, obj)

    def delete_pod(self, namespace: str, name: str) -> bool:
        _, pods, _ = self._fleet()
        with self._cond:
            return self._delete(pods, namespace, name)

    def pod(self, namespace: str, name: str) -> RawObject | None:
        _, pods, _ = self._fleet()
        with self._cond:
            obj = pods.objects.get((namespace, name))
            return copy.deepcopy(obj) if obj else None

    def put_autoscaler(self, ref: ScalerRef) -> None:
        self._fleet()[2].append(ref)

    # -- FleetStore --------------------------------------------------------------------------

    def get_deployment(self, namespace: str, name: str) -> RawObject | None:
        deployments, _, _ = self._fleet()
        with self._cond:
            self._check("get_deployment", name)
            obj = deployments.objects.get((namespace, name))
            return copy.deepcopy(obj) if obj else None

    def list_deployments(self, namespace: str, labels: str) -> list[RawObject]:
        deployments, _, _ = self._fleet()
        with self._cond:
            return [
                copy.deepcopy(o)
                for (ns, _), o in sorted(deployments.objects.items())
                if ns == namespace and matches_labels(o["metadata"].get("labels") or {}, labels)
            ]

    def patch_deployment_annotations(
        self, namespace: str, name: str, annotations: dict[str, str | None]
    ) -> None:
        deployments, _, _ = self._fleet()
        with self._cond:
            self._check("patch_deployment_annotations", name)
            obj = copy.deepcopy(self._get(deployments, namespace, name, None))
            meta = obj["metadata"]
            meta["annotations"] = apply_merge_patch(meta.get("annotations") or {}, annotations)
            self._replace(deployments, namespace, name, obj)

    def get_scale(self, namespace: str, name: str) -> Scale | None:
        obj = self.get_deployment(namespace, name)
        return None if obj is None else _scale(obj)

    def patch_scale(
        self, namespace: str, name: str, replicas: int, resource_version: str | None
    ) -> Scale:
        deployments, _, _ = self._fleet()
        with self._cond:
            self._check("patch_scale", name)
            obj = copy.deepcopy(self._get(deployments, namespace, name, resource_version))
            obj["spec"]["replicas"] = replicas
            return _scale(self._replace(deployments, namespace, name, obj))

    def set_deployment_status(self, namespace: str, name: str, status: RawObject) -> None:
        """What the Deployment controller reports (bumps the version, as it does)."""
        deployments, _, _ = self._fleet()
        with self._cond:
            obj = copy.deepcopy(self._get(deployments, namespace, name, None))
            obj["status"] = {**obj.get("status", {}), **status}
            self._replace(deployments, namespace, name, obj)

    def list_autoscalers(self, namespace: str) -> list[ScalerRef]:
        with self._cond:
            self._check("list_autoscalers", namespace)
            return list(self._fleet()[2])

    def list_pods(self, namespace: str, labels: str) -> list[RawObject]:
        _, pods, _ = self._fleet()
        with self._cond:
            self._check("list_pods", "")
            return [
                copy.deepcopy(o)
                for (ns, _), o in sorted(pods.objects.items())
                if ns == namespace and matches_labels(o["metadata"].get("labels") or {}, labels)
            ]

    def patch_pod_annotations(
        self, namespace: str, name: str, annotations: dict[str, str | None]
    ) -> None:
        _, pods, _ = self._fleet()
        with self._cond:
            self._check("patch_pod_annotations", name)
            obj = copy.deepcopy(self._get(pods, namespace, name, None))
            meta = obj["metadata"]
            meta["annotations"] = apply_merge_patch(meta.get("annotations") or {}, annotations)
            self._replace(pods, namespace, name, obj)


def _scale(obj: RawObject) -> Scale:
    labels = obj["spec"]["selector"]["matchLabels"]
    return Scale(
        replicas=int(obj["spec"].get("replicas") or 0),
        status_replicas=int((obj.get("status") or {}).get("replicas") or 0),
        selector=",".join(f"{k}={v}" for k, v in sorted(labels.items())),
        resource_version=str(obj["metadata"]["resourceVersion"]),
    )
