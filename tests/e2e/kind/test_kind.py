"""The short kind test of `make test`: kind comes up here, offline, and runs the system.

The cluster comes up on the node image built here (its egress guard checked by
recall_dev.kind before anything runs); the chart installs (the pod tests' release); one Batch
completes through the worker pods; and what the node image promises holds: pods have no
default route, and a PersistentVolumeClaim binds without a provisioner of our own. The full
pod tests run on kind with `make e2e-kind`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from recall_dev import speech
from tests.e2e.pods.conftest import NAMESPACE, PodCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1500)]

T = TypeVar("T")
SCRATCH = "kind-smoke"  # a namespace of this test's own, for the volume check


def poll(what: str, probe: Callable[[], T | None], timeout: float) -> T:
    """`probe()`'s first value that is not None, or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(1)


def get(cluster: PodCluster, *args: str) -> Any:
    return json.loads(cluster.kubectl("get", *args, "-o", "json"))


def test_kind__the_chart_installs_and_a_batch_completes_through_worker_pods(
    cluster: PodCluster, release: str
) -> None:
    wav = cluster.media_dir / "hello.wav"
    speech.synthesize([speech.SENTENCES[0]], wav)
    wav.chmod(0o644)
    batch = {
        "apiVersion": "recall.dev/v1alpha1",
        "kind": "Batch",
        "metadata": {"name": "smoke", "namespace": NAMESPACE},
        "spec": {
            "defaults": {"language": "en", "engine": {"name": "whisper", "chunkSeconds": 10}},
            "items": [{"key": "hello", "source": {"url": "file:///media/hello.wav"}}],
        },
    }
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(batch))

    def completed() -> dict[str, Any] | None:
        counts = get(cluster, "batch", "smoke", "-n", NAMESPACE).get("status", {}).get("counts")
        assert not (counts or {}).get("failed"), f"the item failed: {counts}"
        return counts if counts and counts.get("completed") == 1 else None

    poll("the Batch to complete", completed, timeout=420)
    workers = {p["metadata"]["name"] for p in cluster.pods("worker")}
    jobs = [
        job
        for job in get(cluster, "transcriptionjobs", "-n", NAMESPACE)["items"]
        if job["spec"].get("batchRef") == "smoke"
    ]
    assert len(jobs) == 1
    status = jobs[0]["status"]
    assert status["phase"] == "Succeeded"
    assert status["result"]["worker"] in workers, "a worker pod of the release did the work"


def test_kind__pods_have_no_default_route_and_a_claim_binds(
    cluster: PodCluster, release: str
) -> None:
    worker = cluster.pods("worker")[0]["metadata"]["name"]
    routes = cluster.kubectl(
        "exec", "-n", NAMESPACE, worker, "-c", "worker", "--",
        "python3", "-c", "print(open('/proc/net/route').read())",
    )  # fmt: skip
    destinations = [line.split()[1] for line in routes.strip().splitlines()[1:]]
    assert destinations and "00000000" not in destinations, f"a default route: {routes}"

    image = get(cluster, "pod", worker, "-n", NAMESPACE)["spec"]["containers"][0]["image"]
    objects = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SCRATCH}},
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data", "namespace": SCRATCH},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Mi"}},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "writer", "namespace": SCRATCH},
            "spec": {
                "restartPolicy": "Never",
                "securityContext": {"runAsUser": 0},
                "containers": [
                    {
                        "name": "writer",
                        "image": image,
                        "imagePullPolicy": "Never",
                        "command": ["python3", "-c", "open('/data/ok', 'w').write('ok')"],
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    }
                ],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
            },
        },
    ]
    cluster.kubectl(
        "apply",
        "-f",
        "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}),
    )
    try:

        def succeeded() -> bool | None:
            phase = get(cluster, "pod", "writer", "-n", SCRATCH).get("status", {}).get("phase")
            assert phase != "Failed", "the pod could not write to its volume"
            return True if phase == "Succeeded" else None

        poll("the pod on the claimed volume", succeeded, timeout=180)
        claim = get(cluster, "pvc", "data", "-n", SCRATCH)
        assert claim["status"]["phase"] == "Bound"
        assert claim["spec"]["storageClassName"] == "standard"
    finally:
        cluster.kubectl("delete", "namespace", SCRATCH, "--wait=false")
