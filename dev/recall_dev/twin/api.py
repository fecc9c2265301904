"""`MemoryApi`: the typed calls (`recall.kube.typed`) over the in-memory twin of the API server
(`recall_dev.twin.verbs`), and the controls a test plays the cluster with.

No controller acts on anything: tests play the ReplicaSet and the kubelet (`put_pod`,
`delete_pod`, `set_deployment_status`; `tests/unit/operator/fleet.py`), and an administrator
(`put_secret`, `put_autoscaler`, `delete_batch`). `inject(Fault(...))` makes calls fail
(`recall_dev.twin.verbs` says how they are named).
"""

from __future__ import annotations

import base64
import copy
import json

from recall.base.clock import SYSTEM, Clock
from recall.kube.base import NotFound, RawObject, ScalerRef
from recall.kube.typed import TypedClient
from recall.kube.verbs import (
    BATCHES,
    DEPLOYMENTS,
    EVENTS,
    HPAS,
    JOBS,
    PODS,
    SCALED_OBJECTS,
    SECRETS,
)
from recall_dev.twin.rules import CONFIG_MAP_LIMIT
from recall_dev.twin.verbs import Fault, MemoryVerbs, stamp

__all__ = ["CONFIG_MAP_LIMIT", "Fault", "MemoryApi", "MemoryVerbs", "stamp"]


class MemoryApi(TypedClient):
    """The typed calls over `MemoryVerbs`, and the controls a test plays the cluster with."""

    def __init__(self, *, watch_seconds: float = 5.0, clock: Clock = SYSTEM) -> None:
        self.memory = MemoryVerbs(watch_seconds=watch_seconds, clock=clock)
        super().__init__(self.memory, clock=clock)

    # -- faults and what was asked -----------------------------------------------------------

    def inject(self, fault: Fault) -> None:
        self.memory.inject(fault)

    def close(self) -> None:
        """End every watch (a test's teardown)."""
        self.memory.close()

    @property
    def calls(self) -> list[tuple[str, str]]:
        return self.memory.calls

    @property
    def events(self) -> list[RawObject]:
        """Every Event posted, oldest first."""
        return self.memory.objects(EVENTS)

    def dump(self) -> str:
        """Every job, one JSON line each (assertion messages)."""
        return "\n".join(json.dumps(o) for o in self.memory.objects(JOBS))

    # -- what controllers, the kubelet and administrators do ---------------------------------

    def delete_batch(self, namespace: str, name: str) -> bool:
        return self.memory.delete(BATCHES, namespace, name)

    def put_secret(self, namespace: str, name: str, data: dict[str, bytes]) -> None:
        encoded = {k: base64.b64encode(v).decode() for k, v in data.items()}
        self.memory.put(SECRETS, namespace, {"metadata": {"name": name}, "data": encoded})

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
        meta = {"name": name, "namespace": namespace, "generation": 1, "labels": own_labels or {}}
        obj: RawObject = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {"replicas": replicas, "selector": {"matchLabels": dict(labels)}},
            "status": {"observedGeneration": 1, "replicas": replicas, "updatedReplicas": replicas},
        }
        return self.memory.put(DEPLOYMENTS, namespace, obj)

    def set_deployment_status(self, namespace: str, name: str, status: RawObject) -> None:
        """What the Deployment controller reports (bumps the version, as it does)."""
        obj = self.memory.get(DEPLOYMENTS, namespace, name)
        if obj is None:
            raise NotFound(f'deployments "{name}" not found', status=404)
        obj["status"] = {**obj.get("status", {}), **status}
        self.memory.put(DEPLOYMENTS, namespace, obj)

    def put_pod(self, namespace: str, pod: RawObject) -> RawObject:
        """Create or replace a pod (as a kubelet and a ReplicaSet would leave it)."""
        obj = copy.deepcopy(pod)
        obj["metadata"] = {
            "namespace": namespace,
            "creationTimestamp": stamp(self.clock),
            **obj["metadata"],
        }
        return self.memory.put(PODS, namespace, obj)

    def delete_pod(self, namespace: str, name: str) -> bool:
        return self.memory.delete(PODS, namespace, name)

    def pod(self, namespace: str, name: str) -> RawObject | None:
        return self.memory.get(PODS, namespace, name)

    def put_autoscaler(self, ref: ScalerRef, namespace: str = "default") -> None:
        """An HPA or a KEDA ScaledObject of `namespace` that scales `ref`'s target."""
        resource = HPAS if ref.kind == "HorizontalPodAutoscaler" else SCALED_OBJECTS
        target = {"kind": ref.target_kind, "name": ref.target_name}
        obj = {"kind": ref.kind, "metadata": {"name": ref.name}, "spec": {"scaleTargetRef": target}}
        self.memory.put(resource, namespace, obj)
