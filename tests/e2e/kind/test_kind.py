"""The short kind test of `make test`: kind comes up here, offline, and runs the system.

The cluster (a control plane and one worker node) comes up on the node image built here
(every node's egress guard checked by recall_dev.kind before anything runs); the chart
installs (the pod tests' release); one Batch completes through the worker pods; what the node
image promises holds: pods have no default route, and a PersistentVolumeClaim binds (its
local-path provisioner, a directory any user may write); and one drill: the worker node dies
mid-job and its job finishes on the other node. The full pod tests and the drills run on three
nodes with `make e2e-kind`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from recall.kube.client import KubeClient as Kube
from recall_dev import speech
from tests.e2e.pods.conftest import NAMESPACE, PodCluster
from tests.e2e.pods.drills import Ledger, figures, reclaim_delays

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1500)]

T = TypeVar("T")
SCRATCH = "kind-smoke"  # a namespace of this test's own, for the volume check
LEASE = 20


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
                # Not root: the claim's directory is writable by any user (local-path).
                "securityContext": {"runAsUser": 10001, "runAsNonRoot": True},
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


def test_kind__a_worker_node_dies_and_its_job_is_reclaimed_and_finishes_on_the_other(
    cluster: PodCluster, release: str, kube: Kube
) -> None:
    """The short drill of `make test`: of the two nodes, the one that is not the control plane
    is killed while its worker transcribes; the job is reclaimed no sooner than its lease after
    its last renewal and finishes on the other node's worker; no result of the dead node is
    accepted (the e2e-kind drills do more, on three nodes)."""
    kind = cluster.kind
    (node,) = kind.workers
    for key in ("long-a", "long-b"):
        wav = cluster.media_dir / f"{key}.wav"
        speech.speak_for(40, wav)
        wav.chmod(0o644)
    placement = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in cluster.pods("worker")}
    assert set(placement.values()) == set(kind.nodes), f"the workers' spread: {placement}"
    ledger = Ledger(kube, NAMESPACE)
    thread = threading.Thread(target=ledger.run, name="smoke-ledger", daemon=True)
    thread.start()
    try:
        batch = {
            "apiVersion": "recall.dev/v1alpha1",
            "kind": "Batch",
            "metadata": {"name": "drill", "namespace": NAMESPACE},
            "spec": {
                "defaults": {
                    "language": "en",
                    "leaseDurationSeconds": LEASE,
                    "checkpointSeconds": 1,  # found mid-way by its progress
                    "maxAttempts": 5,
                    "engine": {"name": "whisper", "chunkSeconds": 10},
                },
                "items": [
                    {"key": k, "source": {"url": f"file:///media/{k}.wav"}}
                    for k in ("long-a", "long-b")
                ],
            },
        }
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(batch))

        def on_the_node() -> dict[str, str] | None:
            held = {
                job: s.holder
                for job, s in ledger.last("drill").items()
                if s.phase == "Leased" and s.chunks >= 1 and placement.get(s.holder) == node
            }
            return held or None

        held = poll("a job in flight on the worker node", on_the_node, timeout=420)
        kind.kill_node(node)
        fault = time.monotonic()

        def completed() -> dict[str, Any] | None:
            counts = get(cluster, "batch", "drill", "-n", NAMESPACE).get("status", {}).get("counts")
            return counts if counts and counts.get("completed") == 2 else None

        poll("the Batch to complete on the control plane's worker", completed, timeout=600)
        delays = reclaim_delays(ledger.of("drill"), fault, held)
        found = figures(
            ledger, "drill", "worker node killed (make test, 2 nodes)", fault, 2, lease=LEASE,
            moved=held, reclaimed_after_renewal_seconds=[round(min(delays.values() or [0]), 1),
                                                         round(max(delays.values() or [0]), 1)],
        )  # fmt: skip
    finally:
        ledger.stop.set()
        thread.join(5)
    found.write()
    assert (found.lost, found.duplicates) == (0, 0), found
    assert set(delays) == set(held), f"reclaims seen: {delays} of {held}"
    assert min(delays.values()) >= LEASE, f"reclaimed before the lease expired: {delays}"
    for job in held:
        status = get(cluster, "tj", job, "-n", NAMESPACE)["status"]
        assert status["phase"] == "Succeeded"
        assert placement.get(status["result"]["worker"]) != node, "the dead node's result"
