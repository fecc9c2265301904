"""A fresh install never hangs, on kind: the chart's operator, workers and bundled store started
in every order, and the store's pod recreated on an empty volume.

Its own release (`fresh`, namespace `recall-install`: the simulated engine, one operator, two
workers, the store's data in an emptyDir, so that every new store pod is a fresh store with no
bucket). For each order the three Deployments are scaled to zero, then up one after the other,
each running a while alone with what came before it; then the operator must become ready (its
readiness probe: the results store answers) without a restart of anything, and a Batch must
complete. tests/integration/test_fresh_install.py does the same with processes.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from recall.kube.client import KubeClient as Kube
from tests.e2e.pods.conftest import PodCluster, install, simulated_release, uninstall
from tests.e2e.pods.drills import batch_manifest
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

NS = "recall-install"
RELEASE = "fresh"
REPLICAS = {"store": 1, "operator": 1, "worker": 2}
VALUES: dict[str, Any] = {
    **simulated_release(operators=1, workers=2, grace_seconds=2),
    "store": {"bundled": {"persistence": {"enabled": False}}},
}


@pytest.fixture(scope="module")
def fresh(cluster: PodCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodCluster]:
    path = tmp_path_factory.mktemp("install") / "values.yaml"
    path.write_text(yaml.safe_dump(VALUES))
    install(cluster, RELEASE, NS, "--values", str(path))
    try:
        yield cluster
    finally:
        uninstall(cluster, RELEASE, NS)


def pods(cluster: PodCluster, component: str) -> list[dict[str, Any]]:
    return [p for p in cluster.pods(component, NS) if not p["metadata"].get("deletionTimestamp")]


def scale(cluster: PodCluster, component: str, replicas: int) -> None:
    cluster.kubectl(
        "scale", "-n", NS, f"deployment/{RELEASE}-recall-{component}", f"--replicas={replicas}"
    )


def running(cluster: PodCluster, component: str) -> bool:
    found = pods(cluster, component)
    return len(found) == REPLICAS[component] and all(
        p["status"].get("phase") == "Running" for p in found
    )


def restarts(cluster: PodCluster) -> dict[str, int]:
    return {
        p["metadata"]["name"]: sum(
            c.get("restartCount", 0) for c in p["status"].get("containerStatuses", [])
        )
        for component in REPLICAS
        for p in pods(cluster, component)
    }


def operator_ready(cluster: PodCluster) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for p in pods(cluster, "operator")
        for c in p["status"].get("conditions", [])
    )


def complete(cluster: PodCluster, kube: Kube, name: str) -> None:
    batch = batch_manifest(name, NS, 3, chunks=2, seconds=0.5, lease=15)
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(batch))

    def done() -> bool:
        b = kube.get_batch(NS, name)
        return b is not None and b.status.complete

    wait_for(done, timeout=180, interval=1, message=f"Batch {name} complete")
    found = kube.get_batch(NS, name)
    assert found is not None and found.status.counts is not None
    assert found.status.counts.completed == 3


@pytest.mark.parametrize("order", list(itertools.permutations(REPLICAS)), ids="-".join)
def test_install__in_any_start_order_the_operator_gets_ready_and_a_batch_completes(
    fresh: PodCluster, kube: Kube, order: tuple[str, ...]
) -> None:
    for component in REPLICAS:
        scale(fresh, component, 0)
    wait_for(
        lambda: not any(pods(fresh, c) for c in REPLICAS), timeout=120, interval=1,
        message="every pod of the release gone",
    )  # fmt: skip
    for component in order:
        scale(fresh, component, REPLICAS[component])

        def started(c: str = component) -> bool:
            return running(fresh, c)

        wait_for(started, timeout=120, interval=0.5, message=f"the {component} running")
        time.sleep(5)  # alone with what came before it: the probes and first calls fail
    wait_for(lambda: operator_ready(fresh), timeout=120, interval=1, message="the operator ready")
    complete(fresh, kube, "order-" + "-".join(order))
    assert all(n == 0 for n in restarts(fresh).values()), restarts(fresh)


def test_install__the_store_pod_recreated_on_an_empty_volume_makes_its_bucket_again(
    fresh: PodCluster, kube: Kube
) -> None:
    complete(fresh, kube, "before")
    (store,) = pods(fresh, "store")
    fresh.kubectl("delete", "pod", "-n", NS, store["metadata"]["name"], "--wait=false")
    old = store["metadata"]["name"]

    def replaced() -> bool:
        names = [p["metadata"]["name"] for p in pods(fresh, "store")]
        return old not in names and running(fresh, "store")

    wait_for(replaced, timeout=120, interval=1, message="a new store pod")
    wait_for(lambda: operator_ready(fresh), timeout=120, interval=1, message="the operator ready")
    complete(fresh, kube, "after")
