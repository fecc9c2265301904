"""A fresh install never hangs: the operator, the workers and the results store started in
every order, and the store restarted on an empty volume, against the real API server and a
real S3 server (SeaweedFS) of the test's own.

The store is what the chart bundles: `weed mini` making its bucket itself at each start
(`-bucket`), after its S3 port opens, with no bucket made by a write (`-s3.autoCreateBucket=
false`). The operator's readiness (`/readyz`) must become 200 whichever came first, without a
restart of anything, and a Batch must complete through the workers. Found on a real node: an
operator whose one probe at start met a store that had no bucket yet stayed unready for good.
"""

from __future__ import annotations

import itertools
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from recall.kube.client import KubeClient as Kube
from recall.resources import API_VERSION
from recall_dev.cluster import free_port
from recall_dev.objstore import ObjectStore
from tests.helpers import Procs, get_batch, readyz, wait_for

BUCKET = "recall"
COMPONENTS = ("store", "operator", "worker")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ObjectStore]:
    """The bundled store's stand-in, on ports chosen now and started when the test says."""
    weed = ObjectStore(workdir=tmp_path / "store", startup_buckets=(BUCKET,))
    weed.reserve_ports()
    try:
        yield weed
    finally:
        weed.stop()


def batch(name: str, n: int) -> dict[str, object]:
    return {
        "apiVersion": API_VERSION,
        "kind": "Batch",
        "metadata": {"name": name},
        "spec": {
            "items": [
                {"key": f"k{i}", "source": {"url": f"file:///media/{i}.wav"}} for i in range(n)
            ],
            "defaults": {
                "leaseDurationSeconds": 10,
                "engine": {"name": "simulated", "simulate": {"chunks": 2}},
            },
        },
    }


class Install:
    """The three components of one install, each started on demand, against `store`."""

    def __init__(self, procs: Procs, store: ObjectStore, namespace: str) -> None:
        self.procs, self.store, self.namespace = procs, store, namespace
        self.port = free_port()
        store_env = {**store.env(), "RECALL_STORE_URL": f"s3://{BUCKET}/"}
        self.operator_env = {**store_env, "RECALL_OPERATOR_HEALTH_PORT": str(self.port)}
        self.worker_env = {**store.env(store.worker), "RECALL_STORE_URL": f"s3://{BUCKET}/"}

    def start(self, component: str) -> None:
        if component == "store":
            self.store.start()
        elif component == "operator":
            self.procs.recall(
                "operator", "operator", "--namespace", self.namespace, env=self.operator_env
            )
        else:
            self.procs.worker(
                "worker", "--engine", "simulated", "--namespace", self.namespace,
                env=self.worker_env,
            )  # fmt: skip

    def wait_ready(self, timeout: float = 90) -> None:
        wait_for(
            lambda: readyz(self.port)[0] == 200,
            timeout=timeout,
            interval=0.5,
            message=lambda: f"the operator ready: {readyz(self.port)}\n{self.procs.dump()}",
        )

    def complete(self, kube: Kube, name: str, n: int = 2, timeout: float = 90) -> None:
        kube.create_batch(self.namespace, batch(name, n))

        def done() -> bool:
            return bool(get_batch(kube, self.namespace, name).status.complete)

        wait_for(done, timeout=timeout, interval=0.5, message=self.procs.dump)
        counts = get_batch(kube, self.namespace, name).status.counts
        assert counts.completed == n and not counts.failed, counts


@pytest.mark.parametrize("order", list(itertools.permutations(COMPONENTS)), ids="-".join)
def test_install__in_any_start_order_the_operator_gets_ready_and_a_batch_completes(
    kube: Kube, namespace: str, procs: Procs, store: ObjectStore, order: tuple[str, ...]
) -> None:
    install = Install(procs, store, namespace)
    for component in order:
        install.start(component)
        # Each one runs for a while with only what came before it: the operator's probe at
        # start, its first sweep and the workers' first store calls meet a missing store.
        time.sleep(3)
    install.wait_ready()
    install.complete(kube, "first")


def test_install__a_store_that_makes_its_bucket_on_the_first_write_and_starts_late(
    kube: Kube, namespace: str, procs: Procs, tmp_path: Path
) -> None:
    """The hang as it was found: the bucket comes from the operator's probe write (the chart's
    store made it so then), and the operator started first. Its probe at start met no store;
    it must probe again (with backoff) and so make the bucket, not wait for good."""
    late = ObjectStore(workdir=tmp_path / "late-store", auto_create_buckets=True)
    late.reserve_ports()
    try:
        install = Install(procs, late, namespace)
        install.start("operator")
        install.start("worker")
        time.sleep(3)
        late.start()
        install.wait_ready()
        assert late.has_bucket(BUCKET)
        install.complete(kube, "first")
    finally:
        late.stop()


def test_install__the_store_restarted_on_an_empty_volume_makes_its_bucket_and_work_goes_on(
    kube: Kube, namespace: str, procs: Procs, store: ObjectStore
) -> None:
    install = Install(procs, store, namespace)
    for component in COMPONENTS:
        install.start(component)
    install.wait_ready()
    install.complete(kube, "before")
    store.kill()
    shutil.rmtree(store.data_dir)  # an emptyDir: the pod recreated, its volume new
    store.data_dir.mkdir()
    store.restart()
    wait_for(lambda: store.has_bucket(BUCKET), timeout=60, interval=0.2, message="the bucket")
    install.wait_ready()
    install.complete(kube, "after")
