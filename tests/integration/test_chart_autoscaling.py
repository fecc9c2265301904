"""The chart's built-in autoscaling mode with Helm against the real API server: the replica count
the autoscaler owns is never changed by `helm upgrade` (helm/helm#7090) — not when autoscaling
is turned on, not on later upgrades — and the operator's rights over the fleet are exactly what
the scaler uses.

A watch on the worker Deployment records every `spec.replicas` the API server stored during
each upgrade; the count must never move. (No pods run here: the count is the API's truth, and
the ReplicaSet would act on every value it took.)
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, watch

from recall.kube.client import KubeClient as Kube
from recall_dev.cluster import ControlPlane
from tests.helpers import wait_for
from tests.integration.test_chart import CHART, RELEASE, Tools, find, tools

pytestmark = pytest.mark.integration
__all__ = ["tools"]  # the fixture, shared with test_chart.py

WORKER = f"{RELEASE}-recall-worker"
BUILTIN = ["--set", "worker.autoscaling.mode=builtin"]


@dataclass
class Counts:
    """Every spec.replicas of the worker Deployment the API server stored, in order."""

    api: client.ApiClient
    namespace: str
    seen: list[tuple[str, int | None]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self, since: str) -> None:
        apps = client.AppsV1Api(self.api)
        w = watch.Watch()
        for event in w.stream(
            apps.list_namespaced_deployment, self.namespace,
            field_selector=f"metadata.name={WORKER}", resource_version=since,
            timeout_seconds=120,
        ):  # fmt: skip
            obj = event["object"]
            self.seen.append((obj.metadata.resource_version, obj.spec.replicas))
            if self.stop.is_set():
                break
        w.stop()

    def values(self) -> set[int | None]:
        return {r for _, r in self.seen}


@pytest.fixture
def counts(api: client.ApiClient, namespace: str) -> Iterator[Counts]:
    c = Counts(api, namespace)
    yield c
    c.stop.set()


def helm(tools: Tools, cp: ControlPlane, namespace: str, *args: str) -> str:
    return tools.ok(
        "helm", *args, RELEASE, str(CHART), "--namespace", namespace,
        "--set", "crds.install=false",  # the session's CRDs are not this release's
        kubeconfig=cp.kubeconfig,
    )  # fmt: skip


def deployment(api: client.ApiClient, namespace: str) -> Any:
    return client.AppsV1Api(api).read_namespaced_deployment(WORKER, namespace)


def upgrade_watched(
    tools: Tools, cp: ControlPlane, api: client.ApiClient, namespace: str, counts: Counts,
    *args: str,
) -> set[int | None]:  # fmt: skip
    """`helm upgrade` with `args`; returns every count the Deployment had meanwhile."""
    counts.seen.clear()
    counts.stop.clear()
    before = deployment(api, namespace).metadata.resource_version
    thread = threading.Thread(target=counts.run, args=(before,), daemon=True)
    thread.start()
    helm(tools, cp, namespace, "upgrade", *args)
    after = deployment(api, namespace).metadata.resource_version
    if after != before:  # the watch has seen the upgrade's last write once it sent that version
        wait_for(lambda: any(rv == after for rv, _ in counts.seen), timeout=30, message=after)
    counts.stop.set()
    return counts.values() | {deployment(api, namespace).spec.replicas}


def test_template__builtin_leaves_the_count_to_the_autoscaler(tools: Tools, tmp_path: Path) -> None:
    out = tools.ok("helm", "template", RELEASE, str(CHART), *BUILTIN)
    worker = find([d for d in yaml.safe_load_all(out) if d], "Deployment", "-worker")
    assert "replicas" not in worker["spec"]
    assert worker["metadata"]["labels"]["recall.dev/autoscaling"] == "builtin"


def test_upgrade__turning_autoscaling_on_and_later_upgrades_never_change_the_count(
    tools: Tools,
    control_plane: ControlPlane,
    api: client.ApiClient,
    kube: Kube,
    namespace: str,
    counts: Counts,
) -> None:
    helm(tools, control_plane, namespace, "install", "--set", "worker.replicas=3")
    assert deployment(api, namespace).spec.replicas == 3
    # Turning autoscaling on: Helm's three-way merge would remove a field that the previous
    # manifest had and the new one lacks, and the API server would default it to 1.
    seen = upgrade_watched(tools, control_plane, api, namespace, counts, *BUILTIN)
    assert seen == {3}, f"the fleet's count moved during the upgrade: {counts.seen}"
    # The autoscaler scales (through the scale subresource, as the operator does) ...
    scale = kube.get_scale(namespace, WORKER)
    assert scale is not None
    kube.patch_scale(namespace, WORKER, 7, scale.resource_version)
    # ... and later upgrades, with and without --reuse-values, leave its count alone.
    seen = upgrade_watched(
        tools, control_plane, api, namespace, counts, "--reuse-values",
        "--set-string", "worker.podAnnotations.rollout=2",
    )  # fmt: skip
    assert seen == {7}, counts.seen
    seen = upgrade_watched(tools, control_plane, api, namespace, counts, *BUILTIN)
    assert seen == {7}, counts.seen
    # Back to a fixed fleet: the chart's count again.
    helm(tools, control_plane, namespace, "upgrade", "--set", "worker.replicas=2")
    assert deployment(api, namespace).spec.replicas == 2


def can_i(
    api: client.ApiClient, namespace: str, account: str, verb: str, resource: str,
    subresource: str | None,
) -> bool:  # fmt: skip
    """What the API server's authorizer answers for the ServiceAccount (a SubjectAccessReview:
    exact even for a resource this server does not serve, such as KEDA's)."""
    kind, _, name = resource.partition("/")
    plural, _, group = kind.partition(".")
    review = client.AuthorizationV1Api(api).create_subject_access_review(
        {
            "spec": {
                "user": f"system:serviceaccount:{namespace}:{account}",
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"],
                "resourceAttributes": {
                    "namespace": namespace,
                    "verb": verb,
                    "group": group,
                    "resource": plural,
                    "subresource": subresource or "",
                    "name": name,
                },
            }
        }
    )
    return bool(review.status.allowed)


# (verb, resource, subresource, expected) for the operator's ServiceAccount in builtin mode
SCALER_MATRIX = [
    ("get", f"deployments.apps/{WORKER}", "scale", True),
    ("patch", f"deployments.apps/{WORKER}", "scale", True),
    ("patch", f"deployments.apps/{RELEASE}-recall-operator", "scale", False),
    ("patch", "deployments.apps/someone-else", "scale", False),
    ("get", f"deployments.apps/{WORKER}", None, True),
    ("patch", f"deployments.apps/{WORKER}", None, True),  # the status annotation
    ("patch", "deployments.apps/someone-else", None, False),
    ("delete", f"deployments.apps/{WORKER}", None, False),
    ("list", "horizontalpodautoscalers.autoscaling", None, True),
    ("create", "horizontalpodautoscalers.autoscaling", None, False),
    ("list", "scaledobjects.keda.sh", None, True),
    ("list", "pods", None, True),
    ("patch", "pods", None, True),  # safe-to-evict, pod-deletion-cost
    ("delete", "pods", None, False),
    ("create", "pods", None, False),
    ("patch", "pods", "status", False),
]


def test_rbac__the_operator_may_scale_its_workers_and_nothing_more(
    tools: Tools, control_plane: ControlPlane, api: client.ApiClient, namespace: str
) -> None:
    helm(tools, control_plane, namespace, "install", *BUILTIN)
    account = f"{RELEASE}-recall-operator"
    wrong = [
        (verb, resource, sub, expected)
        for verb, resource, sub, expected in SCALER_MATRIX
        if can_i(api, namespace, account, verb, resource, sub) is not expected
    ]
    assert wrong == []
