"""The built-in autoscaler against the real API server: the scale subresource and its fence,
the HPA refusal, Events and the status annotation, a deposed leader's late write, and a drain
through a real registration Lease down to the pod annotations.

This control plane runs no Deployment controller, ReplicaSet controller or kubelet: where the
scaler needs what they report, the test writes it (a Deployment's status, a pod's Ready
condition) through the same status subresources they use. (The status annotation, like any
change of a Deployment's annotations, bumps its generation: the Deployment controller copies
them to its ReplicaSets; `round` reports that observed, as the controller does at once.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client

from recall.base.clock import SYSTEM
from recall.kube import Conflict, ScalerRef
from recall.kube.client import KubeClient as Kube
from recall.operator.dispatch import ReadyQueue
from recall.operator.peers.registry import Registry
from recall.operator.reconcile.cache import JobCache
from recall.operator.scaling.decide import DELETION_COST, DRAINED_COST, Policy, Reason, decide
from recall.operator.scaling.scaler import STATUS_ANNOTATION, Report, Scaler, Sources, Target
from recall.operator.scaling.workload import Workload
from recall.protocol.workers import SELECTOR, lease_name, read
from recall.worker.drain import Drain
from recall.worker.registration import Registration
from tests.helpers import create_job
from tests.unit.fakes import Leader

pytestmark = pytest.mark.integration

NAME = "workers"
LABELS = {"app": "workers"}


def make_deployment(api: client.ApiClient, namespace: str, replicas: int) -> None:
    client.AppsV1Api(api).create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": NAME},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": LABELS},
                "template": {
                    "metadata": {"labels": LABELS},
                    "spec": {"containers": [{"name": "worker", "image": "recall.local/none"}]},
                },
            },
        },
    )
    report_rollout_done(api, namespace)


def report_rollout_done(api: client.ApiClient, namespace: str) -> None:
    """What the Deployment controller would report once its pods match the template."""
    apps = client.AppsV1Api(api)
    d = apps.read_namespaced_deployment(NAME, namespace)
    apps.patch_namespaced_deployment_status(
        NAME,
        namespace,
        {
            "status": {
                "observedGeneration": d.metadata.generation,
                "replicas": d.spec.replicas,
                "updatedReplicas": d.spec.replicas,
            }
        },
    )


def make_pod(api: client.ApiClient, namespace: str, name: str, *, ready: bool) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name, "labels": LABELS},
            "spec": {"containers": [{"name": "worker", "image": "recall.local/none"}]},
        },
    )
    set_ready(api, namespace, name, ready)


def set_ready(api: client.ApiClient, namespace: str, name: str, ready: bool) -> None:
    """What the kubelet reports after its readiness probe."""
    client.CoreV1Api(api).patch_namespaced_pod_status(
        name,
        namespace,
        {
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            }
        },
    )


@dataclass
class Operator:
    """The scaler with the operator's views, relisted from the real server before each round."""

    kube: Kube
    namespace: str
    cache: JobCache
    registry: Registry
    workload: Workload
    ready: ReadyQueue

    @classmethod
    def make(cls, kube: Kube, namespace: str) -> Operator:
        cache, workload, ready = JobCache(SYSTEM), Workload(), ReadyQueue(SYSTEM)
        cache.listeners += [workload.update, ready.update]
        return cls(kube, namespace, cache, Registry(SYSTEM), workload, ready)

    def scaler(self, policy: Policy, leadership: Any = None) -> Scaler:
        sources = Sources(self.workload, self.registry, self.ready.busy)
        return Scaler(
            self.kube, Target(self.namespace, NAME, "simulated"), policy, sources, leadership,
            identity="test",
        )  # fmt: skip

    def sync(self) -> None:
        self.cache.relisted(iter(self.kube.list_jobs(self.namespace).items))
        self.registry.relisted(iter(self.kube.list_leases(self.namespace, SELECTOR).items))

    def round(self, api: client.ApiClient, scaler: Scaler) -> Report:
        """One round of `scaler` on fresh views, then the Deployment controller's report."""
        self.sync()
        report = scaler.run_once()
        report_rollout_done(api, self.namespace)
        return report


@pytest.fixture
def op(kube: Kube, namespace: str) -> Operator:
    return Operator.make(kube, namespace)


def replicas(api: client.ApiClient, namespace: str) -> int:
    return int(client.AppsV1Api(api).read_namespaced_deployment(NAME, namespace).spec.replicas)


def events(kube: Kube, namespace: str, reason: str) -> list[str]:
    return [
        str(e.get("message"))
        for e in kube.list_events(namespace)
        if e.get("reason") == reason and (e.get("involvedObject") or {}).get("kind") == "Deployment"
    ]


# -- the scale subresource ---------------------------------------------------------------------


def test_scale_subresource__a_write_at_a_stale_resource_version_is_refused(
    api: client.ApiClient, kube: Kube, namespace: str
) -> None:
    make_deployment(api, namespace, 2)
    scale = kube.get_scale(namespace, NAME)
    assert scale is not None and scale.replicas == 2
    assert scale.selector == "app=workers"
    written = kube.patch_scale(namespace, NAME, 3, scale.resource_version)
    assert written.replicas == 3 and replicas(api, namespace) == 3
    with pytest.raises(Conflict):
        kube.patch_scale(namespace, NAME, 1, scale.resource_version)  # the version before
    assert replicas(api, namespace) == 3, "the stale write changed nothing"
    assert kube.get_scale(namespace, "nope") is None


def test_scale_subresource__any_change_to_the_deployment_fences_an_older_read(
    api: client.ApiClient, kube: Kube, namespace: str
) -> None:
    make_deployment(api, namespace, 2)
    scale = kube.get_scale(namespace, NAME)
    assert scale is not None
    kube.patch_deployment_annotations(namespace, NAME, {STATUS_ANNOTATION: "{}"})
    with pytest.raises(Conflict):
        kube.patch_scale(namespace, NAME, 0, scale.resource_version)
    report_rollout_done(api, namespace)  # the controller's status writes move it too
    fresh = kube.get_scale(namespace, NAME)
    assert fresh is not None and fresh.resource_version != scale.resource_version
    assert kube.patch_scale(namespace, NAME, 0, fresh.resource_version).replicas == 0


def make_hpa(api: client.ApiClient, namespace: str, **spec: int) -> None:
    """The HorizontalPodAutoscaler cpu, of 3 replicas at most (and `spec`), on the workers'
    Deployment."""
    target = {"apiVersion": "apps/v1", "kind": "Deployment", "name": NAME}
    client.AutoscalingV2Api(api).create_namespaced_horizontal_pod_autoscaler(
        namespace,
        {"metadata": {"name": "cpu"}, "spec": {"scaleTargetRef": target, **spec, "maxReplicas": 3}},
    )


def test_autoscalers__an_hpa_is_found_and_no_keda_installed_is_none(
    api: client.ApiClient, kube: Kube, namespace: str
) -> None:
    make_deployment(api, namespace, 1)
    assert kube.list_autoscalers(namespace) == []  # no ScaledObject CRD here: not an error
    make_hpa(api, namespace, minReplicas=1)
    assert kube.list_autoscalers(namespace) == [
        ScalerRef("HorizontalPodAutoscaler", "cpu", "Deployment", NAME)
    ]


# -- the scaler --------------------------------------------------------------------------------


def test_scaler__scales_up_with_an_event_and_the_status_annotation(
    api: client.ApiClient, kube: Kube, namespace: str, op: Operator
) -> None:
    make_deployment(api, namespace, 0)
    for k in range(3):
        create_job(kube, namespace, f"j{k}")
    op.sync()
    scaler = op.scaler(Policy(maximum=5, cooldown=60))
    op.round(api, scaler)  # the term's fence
    report = op.round(api, scaler)
    assert report.scaled == 3 and replicas(api, namespace) == 3
    assert events(kube, namespace, "ScaledUp") == [
        "0 → 3 workers: 3 outstanding jobs (3 queued, 0 leased)"
    ]
    deployment = client.AppsV1Api(api).read_namespaced_deployment(NAME, namespace)
    status = json.loads(deployment.metadata.annotations[STATUS_ANNOTATION])
    assert (status["desired"], status["current"], status["reason"]) == (3, 3, "ScaledUp")


def test_scaler__refuses_with_an_event_and_a_condition_when_an_hpa_targets_it(
    api: client.ApiClient, kube: Kube, namespace: str, op: Operator
) -> None:
    make_deployment(api, namespace, 1)
    make_hpa(api, namespace)
    create_job(kube, namespace, "j0")
    create_job(kube, namespace, "j1")
    op.sync()
    scaler = op.scaler(Policy(maximum=5))
    for _ in range(3):
        report = op.round(api, scaler)
        assert report.scaled is None
    assert report.decision is not None and report.decision.reason is Reason.REFUSED
    assert replicas(api, namespace) == 1
    (refused,) = events(kube, namespace, "ScalingRefused")
    assert "HorizontalPodAutoscaler cpu already scales the Deployment" in refused
    deployment = client.AppsV1Api(api).read_namespaced_deployment(NAME, namespace)
    (condition,) = json.loads(deployment.metadata.annotations[STATUS_ANNOTATION])["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "AbleToScale",
        "False",
        "Refused",
    )


def test_scaler__a_deposed_leaders_late_write_cannot_land(
    api: client.ApiClient, kube: Kube, namespace: str, op: Operator
) -> None:
    make_deployment(api, namespace, 2)
    old = op.scaler(Policy(maximum=8), Leader())
    op.round(api, old)  # its term began
    for k in range(6):
        create_job(kube, namespace, f"j{k}")
    op.sync()
    inputs, deployment = old.observe()  # it read the Deployment, then froze
    decision = decide(inputs, SYSTEM.monotonic())
    assert decision.replicas == 6
    new = op.scaler(Policy(maximum=3))  # the next leader (another policy, to tell them apart)
    op.round(api, new)  # its first write, the status annotation, moves the resourceVersion
    report = old.apply(decision, deployment)
    assert report.conflict and report.scaled is None
    assert op.round(api, new).scaled == 3
    assert replicas(api, namespace) == 3


def test_drain__through_a_real_registration_lease_down_to_the_pod_annotations(
    api: client.ApiClient, kube: Kube, namespace: str, op: Operator
) -> None:
    make_deployment(api, namespace, 2)
    drains = {}
    for name in ("w-a", "w-b"):
        make_pod(api, namespace, name, ready=True)
        drains[name] = Drain(name, wait=0.0)
        Registration(kube, namespace, name, "simulated", drain=drains[name]).renew_once()
    op.sync()
    scaler = op.scaler(Policy(minimum=0, maximum=4, cooldown=0.0, step=1))
    op.round(api, scaler)  # the fence
    report = op.round(api, scaler)
    assert report.decision is not None and report.decision.reason is Reason.DRAINING
    (asked,) = report.drained
    lease = kube.get_lease(namespace, lease_name(asked))
    assert lease is not None and read(lease).drain is not None and not read(lease).drained
    # the worker's next renewal answers; the kubelet then sees /readyz fail
    Registration(kube, namespace, asked, "simulated", drain=drains[asked]).renew_once()
    assert drains[asked].draining()
    set_ready(api, namespace, asked, False)
    op.sync()
    report = op.round(api, scaler)
    assert report.decision is not None
    assert (report.decision.reason, report.scaled) == (Reason.SCALED_DOWN, 1)
    pod = client.CoreV1Api(api).read_namespaced_pod(asked, namespace)
    assert pod.metadata.annotations[DELETION_COST] == DRAINED_COST, "before the count went down"
    other = "w-b" if asked == "w-a" else "w-a"
    kept = client.CoreV1Api(api).read_namespaced_pod(other, namespace)
    assert (kept.metadata.annotations or {}).get(DELETION_COST) is None
    assert events(kube, namespace, "ScaledDown") == [
        f"2 → 1 workers: 0 outstanding jobs (0 queued, 0 leased); drained {asked}"
    ]
