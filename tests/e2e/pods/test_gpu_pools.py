"""A GPU pool scheduled on a real node that advertises `nvidia.com/gpu`, on kind (`make e2e-kind`).

There is no GPU here. What a GPU pool asks of Kubernetes is proven as Kubernetes' own
extended-resource tests prove it: the last worker node's status capacity is patched through the
API server to advertise two `nvidia.com/gpu` (the kubelet keeps an extended resource it does not
manage and derives its allocatable from it), the node is labelled `nvidia.com/gpu.present=true`
and tainted `nvidia.com/gpu=present:NoSchedule`, as the NVIDIA GPU Operator marks GPU nodes.

Its own release (`gpu`, namespace `recall-gpu`), builtin autoscaling, the simulated engine:
- the default pool (one slot a worker, at most two workers), which tolerates nothing;
- the pool `gpu`: `nvidia.com/gpu: 1` a worker, the node selector and toleration of the GPU
  node, two slots a worker, at most three workers, `device: cpu` (no CUDA here).

A Batch with `defaults.pool: gpu` and a Batch without a pool, applied together with every
pool at zero workers. Checked: the GPU pool scales from zero on its own work (three workers
wanted for six jobs of two slots each), two of its pods run on the GPU node and the third stays
Pending for want of a GPU (the scheduler counts the extended resource); every job of the GPU
Batch is done by a GPU pool pod on the GPU node, every job of the other Batch by a default pool
pod elsewhere; a GPU worker holds two leases at once; both pools go back to zero, and no job is
released or reclaimed on the way. The figures (apply to first claim per pool, where it went,
pods per node, back to zero) are printed and written to build/gpu/pool-scaling.json.

What only a real GPU shows is not here: the NVIDIA device plugin, the CUDA image's libraries
loaded, the engine's speed and memory on the device (docs/gpu.md).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client

from recall.kube.client import KubeClient as Kube
from recall.resources import Phase
from tests.e2e.pods.conftest import ROOT, SMALL_WORKER, PodCluster
from tests.e2e.pods.fleet import (
    apply_batch,
    first_claim,
    interrupted,
    jobs_of,
    sampled_release,
    wait_done,
)
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1200)]

NS = "recall-gpu"
RELEASE = "gpu"
DEFAULT = f"{RELEASE}-recall-worker"
GPU = f"{RELEASE}-recall-worker-gpu"
GPU_RESOURCE = "nvidia.com/gpu"
GPUS_ON_THE_NODE = 2
GPU_LABEL = ("nvidia.com/gpu.present", "true")
GPU_TAINT = f"{GPU_RESOURCE}=present:NoSchedule"
SLOTS = 2
GPU_MAX = 3
COOLDOWN = 8
VALUES: dict[str, Any] = {
    "engine": {"name": "simulated"},
    "operator": {"replicas": 1},
    "worker": {
        "graceSeconds": 2,
        "autoscaling": {
            "mode": "builtin",
            "minReplicas": 0,
            "maxReplicas": 2,
            "cooldownSeconds": COOLDOWN,
            "scaleDownStep": 2,
            "builtin": {"intervalSeconds": 1},
        },
        "readinessProbe": {"periodSeconds": 1, "timeoutSeconds": 2, "failureThreshold": 1},
        "extraEnv": [{"name": "RECALL_WORKER_REGISTRATION_SECONDS", "value": "3"}],
        "resources": SMALL_WORKER,
    },
    "pools": [
        {
            "name": "gpu",
            "slots": SLOTS,
            "batchSize": 4,
            "device": "cpu",
            "resources": {
                "requests": SMALL_WORKER["requests"],
                "limits": {**SMALL_WORKER["limits"], GPU_RESOURCE: 1},
            },
            "nodeSelector": dict([GPU_LABEL]),
            "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
            "autoscaling": {"minReplicas": 0, "maxReplicas": GPU_MAX},
        }
    ],
}


@dataclass
class Seen:
    """What a sampler sees every half second: each worker pod's node and pool, the most leases
    one worker held at once, per pool."""

    api: client.ApiClient
    kube: Kube
    pods: dict[str, tuple[str, str]] = field(default_factory=dict)  # pod -> (node or "", pool)
    # pod -> when it was created, scheduled and its container started (epoch seconds)
    times: dict[str, dict[str, float]] = field(default_factory=dict)
    most_leases: Counter[str] = field(default_factory=Counter)  # pool -> leases of one worker
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        core = client.CoreV1Api(self.api)
        while not self.stop.wait(0.5):
            try:
                pods = core.list_namespaced_pod(NS, label_selector="recall.dev/pool").items
                jobs = self.kube.list_jobs(NS).items
            except Exception:  # the API server is busy: the next sample
                continue
            for p in pods:
                node = p.spec.node_name or self.pods.get(p.metadata.name, ("", ""))[0]
                self.pods[p.metadata.name] = (node or "", p.metadata.labels["recall.dev/pool"])
                times = self.times.setdefault(
                    p.metadata.name, {"created": p.metadata.creation_timestamp.timestamp()}
                )
                for c in p.status.conditions or []:
                    if c.type == "PodScheduled" and c.status == "True":
                        times.setdefault("scheduled", c.last_transition_time.timestamp())
                for s in p.status.container_statuses or []:
                    if s.state.running is not None:
                        times.setdefault("running", s.state.running.started_at.timestamp())
            holders = Counter(
                str(o["status"]["lease"]["holder"])
                for o in jobs
                if (o.get("status") or {}).get("phase") == Phase.LEASED.value
            )
            for holder, n in holders.items():
                pool = self.pods.get(holder, ("", "?"))[1]
                self.most_leases[pool] = max(self.most_leases[pool], n)


@dataclass
class Fleet:
    cluster: PodCluster
    kube: Kube
    api: client.ApiClient
    node: str  # the GPU node
    seen: Seen

    def replicas(self, deployment: str) -> int:
        d = client.AppsV1Api(self.api).read_namespaced_deployment(deployment, NS)
        return int(d.spec.replicas or 0)

    def pods(self, pool: str) -> list[Any]:
        return list(
            client.CoreV1Api(self.api)
            .list_namespaced_pod(NS, label_selector=f"recall.dev/pool={pool}")
            .items
        )

    def at_zero(self) -> bool:
        return all(
            self.replicas(d) == 0 and not self.pods(pool)
            for d, pool in ((DEFAULT, "default"), (GPU, "gpu"))
        )

    def describe(self) -> str:
        apps = client.AppsV1Api(self.api)
        lines = []
        for name in (DEFAULT, GPU):
            d = apps.read_namespaced_deployment(name, NS)
            status = (d.metadata.annotations or {}).get("recall.dev/autoscaler")
            lines.append(f"{name}: {d.spec.replicas} replicas, status {status}")
        return "\n".join(lines)

    def apply(self, name: str, n: int, pool: str | None) -> float:
        """`kubectl apply` a Batch of `n` simulated jobs of 4 s (4 chunks of 1 s); returns the
        time just before."""
        simulate = {"chunks": 4, "chunkDelaySeconds": 1}
        return apply_batch(self.cluster, NS, name, n, simulate, **({"pool": pool} if pool else {}))

    def jobs_of(self, batch: str) -> list[dict[str, Any]]:
        return jobs_of(self.kube, NS, batch)

    def first_claim(self, batch: str) -> float:
        return first_claim(self.kube, NS, batch, timeout=300)

    def steps(self, pool: str, applied: float, claimed: float) -> dict[str, float]:
        """Seconds from the apply to the pool's first new pod created, scheduled and running,
        and to its first claim."""
        pods = [
            self.seen.times[name]
            for name, (_, of) in self.seen.pods.items()
            if of == pool and self.seen.times.get(name, {}).get("created", 0) >= int(applied)
        ]

        def first(key: str) -> float:
            times = [t[key] for t in pods if key in t]
            return round(min(times) - applied, 1) if times else float("nan")

        return {
            "pod_created": first("created"),
            "pod_scheduled": first("scheduled"),
            "container_running": first("running"),
            "claimed": round(claimed - applied, 1),
        }

    def wait_done(self, batch: str, timeout: float = 300) -> list[dict[str, Any]]:
        return wait_done(self.kube, NS, batch, timeout)


def allocatable_gpus(api: client.ApiClient, node: str) -> str | None:
    n = client.CoreV1Api(api).read_node(node)
    return (n.status.allocatable or {}).get(GPU_RESOURCE)


@pytest.fixture(scope="module")
def gpu_node(cluster: PodCluster, api: client.ApiClient) -> Iterator[str]:
    """The last worker node, advertising two nvidia.com/gpu (its status capacity patched
    through the API server), labelled and tainted as a GPU node; all undone at the end."""
    node = cluster.kind.workers[-1]
    capacity = {"status": {"capacity": {GPU_RESOURCE: str(GPUS_ON_THE_NODE)}}}
    cluster.kubectl(
        "patch", "node", node, "--subresource=status", "--type=merge", "-p", json.dumps(capacity)
    )
    cluster.kubectl("label", "node", node, "=".join(GPU_LABEL), "--overwrite")
    cluster.kubectl("taint", "node", node, GPU_TAINT, "--overwrite")
    try:
        # The kubelet derives the node's allocatable from its capacity at its next status update.
        wait_for(lambda: allocatable_gpus(api, node) == str(GPUS_ON_THE_NODE), timeout=120,
                 interval=1, message=f"{node} to allocate {GPU_RESOURCE}")  # fmt: skip
        yield node
    finally:
        cluster.run("kubectl", "taint", "node", node, f"{GPU_TAINT}-", check=False)
        cluster.run("kubectl", "label", "node", node, f"{GPU_LABEL[0]}-", check=False)
        gone = {"status": {"capacity": {GPU_RESOURCE: None}, "allocatable": {GPU_RESOURCE: None}}}
        cluster.run(
            "kubectl", "patch", "node", node, "--subresource=status", "--type=merge",
            "-p", json.dumps(gone), check=False,
        )  # fmt: skip


@pytest.fixture(scope="module")
def fleet(
    cluster: PodCluster,
    kube: Kube,
    api: client.ApiClient,
    gpu_node: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Fleet]:
    seen = Seen(api, kube)
    tmp = tmp_path_factory.mktemp("gpu")
    with sampled_release(cluster, RELEASE, NS, VALUES, tmp, seen, "gpu-pool-sampler"):
        yield Fleet(cluster, kube, api, gpu_node, seen)


def test_gpu_pool__scheduled_on_the_gpu_node_from_zero_and_back_beside_the_default_pool(
    fleet: Fleet,
) -> None:
    # A fresh install sets no count (1 by the API server's default): with nothing to do,
    # both pools go to zero after the cooldown.
    wait_for(fleet.at_zero, timeout=240, interval=0.5, message=fleet.describe)

    applied = fleet.apply("on-gpu", 3 * SLOTS, pool="gpu")
    fleet.apply("on-cpu", 3, pool=None)
    gpu_claim = fleet.first_claim("on-gpu") - applied
    cpu_claim = fleet.first_claim("on-cpu") - applied

    # Three GPU workers wanted; the node has two GPUs: two run there, the third waits for one.
    wait_for(lambda: fleet.replicas(GPU) == GPU_MAX, timeout=60, interval=0.5,
             message=fleet.describe)  # fmt: skip

    def pending_for_a_gpu() -> list[str]:
        return [
            c.message
            for p in fleet.pods("gpu")
            for c in p.status.conditions or []
            if c.type == "PodScheduled"
            and c.status == "False"
            and GPU_RESOURCE in (c.message or "")
        ]

    unschedulable = wait_for(pending_for_a_gpu, timeout=120, interval=0.5,
                             message="a GPU pod Pending for want of a GPU")  # fmt: skip
    assert f"Insufficient {GPU_RESOURCE}" in unschedulable[0], unschedulable

    gpu_jobs = fleet.wait_done("on-gpu")
    cpu_jobs = fleet.wait_done("on-cpu")
    done = time.monotonic()
    for jobs in (gpu_jobs, cpu_jobs):
        assert {(o.get("status") or {}).get("phase") for o in jobs} == {Phase.SUCCEEDED.value}
    wait_for(fleet.at_zero, timeout=240, interval=0.5, message=fleet.describe)
    back_to_zero = time.monotonic() - done

    where = {pod: at for pod, at in fleet.seen.pods.items() if at[0]}  # pods that got a node
    gpu_workers = {o["status"]["result"]["worker"] for o in gpu_jobs}
    cpu_workers = {o["status"]["result"]["worker"] for o in cpu_jobs}
    assert {where[w] for w in gpu_workers} == {(fleet.node, "gpu")}, where
    assert all(where[w][1] == "default" and where[w][0] != fleet.node for w in cpu_workers), where
    gpu_nodes = {node for node, pool in where.values() if pool == "gpu"}
    assert gpu_nodes == {fleet.node}, "GPU pool pods ran only on the GPU node"
    assert fleet.node not in {node for node, pool in where.values() if pool == "default"}
    assert fleet.seen.most_leases["gpu"] == SLOTS, "a GPU worker held its two slots at once"
    assert interrupted(gpu_jobs + cpu_jobs) == [], "no job released or reclaimed"

    per_node: dict[str, Counter[str]] = {}
    for node, pool in where.values():
        per_node.setdefault(node, Counter())[pool] += 1
    report = {
        "gpu_node": fleet.node,
        "gpu_first_claim_steps_seconds": fleet.steps("gpu", applied, applied + gpu_claim),
        "first_claim_from_zero_seconds": {
            "gpu": round(gpu_claim, 1),
            "default": round(cpu_claim, 1),
        },
        "gpu_workers_wanted": GPU_MAX,
        "gpus_on_the_node": GPUS_ON_THE_NODE,
        "unschedulable": unschedulable[0],
        "worker_pods_per_node": {n: dict(c) for n, c in sorted(per_node.items())},
        "jobs": {"gpu": len(gpu_jobs), "default": len(cpu_jobs)},
        "most_leases_of_one_worker": dict(fleet.seen.most_leases),
        "back_to_zero_seconds": round(back_to_zero, 1),
        "cooldown_seconds": COOLDOWN,
    }
    print(f"\ngpu pool figures: {json.dumps(report)}")
    out = ROOT / "build" / "gpu"
    out.mkdir(parents=True, exist_ok=True)
    (out / "pool-scaling.json").write_text(json.dumps(report, indent=2) + "\n")
