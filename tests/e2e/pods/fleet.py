"""The fleet of the autoscaling pod tests (tests/e2e/pods/scaling.py): the release's values,
a recorder that samples the fleet every half second, and the helpers that apply Batches and
wait on the fleet, the Batches and their first claims."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml
from kubernetes import client

from recall.kube.client import KubeClient as Kube
from recall.resources import API_VERSION
from tests.e2e.pods.conftest import PodCluster, install, uninstall
from tests.e2e.pods.drills import epoch
from tests.helpers import wait_for

NS = "recall-scale"
RELEASE = "scale"
WORKER = f"{RELEASE}-recall-worker"
MAX = 4
COOLDOWN = 8
VALUES: dict[str, Any] = {
    "engine": {"name": "simulated"},
    "operator": {"leaderElection": {"leaseDuration": 6, "renewDeadline": 4, "retryPeriod": 1}},
    "worker": {
        "replicas": 2,
        "graceSeconds": 2,
        "autoscaling": {
            "minReplicas": 0,
            "maxReplicas": MAX,
            "cooldownSeconds": COOLDOWN,
            "scaleDownStep": 1,
            "builtin": {"intervalSeconds": 1},
        },
        # A drained worker is out of service within a second; renewals every second.
        "readinessProbe": {"periodSeconds": 1, "timeoutSeconds": 2, "failureThreshold": 1},
        "extraEnv": [{"name": "RECALL_WORKER_REGISTRATION_SECONDS", "value": "3"}],
        # Four fit the node's two cores (the CPU share follows the request: a smaller one
        # starves a starting worker while the machine is busy with other test runs).
        "resources": {
            "requests": {"cpu": "250m", "memory": "128Mi", "ephemeral-storage": "64Mi"},
            "limits": {"cpu": "1", "memory": "512Mi", "ephemeral-storage": "256Mi"},
        },
    },
}


@dataclass
class Sample:
    at: float  # time.monotonic()
    replicas: int
    running: int  # worker pods running and not terminating
    leased: int  # leased jobs


@dataclass
class Recorder:
    """Samples the fleet every half second from a thread, for the whole module."""

    api: client.ApiClient
    kube: Kube
    samples: list[Sample] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        apps, core = client.AppsV1Api(self.api), client.CoreV1Api(self.api)
        while not self.stop.wait(0.5):
            try:
                replicas = apps.read_namespaced_deployment(WORKER, NS).spec.replicas or 0
                pods = core.list_namespaced_pod(
                    NS, label_selector="app.kubernetes.io/component=worker"
                ).items
                leased = len(leased_jobs(self.kube))
            except Exception:  # the API server is busy: the next sample
                continue
            running = sum(
                1 for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp
            )
            self.samples.append(Sample(time.monotonic(), replicas, running, leased))

    def since(self, start: float) -> list[Sample]:
        return [s for s in self.samples if s.at >= start]


def leased_jobs(kube: Kube) -> list[dict[str, Any]]:
    return [o for o in kube.list_jobs(NS).items if (o.get("status") or {}).get("phase") == "Leased"]


@dataclass
class Scaling:
    cluster: PodCluster
    kube: Kube
    api: client.ApiClient
    recorder: Recorder
    values: Path
    first_claims: list[float] = field(default_factory=list)  # seconds, from zero workers
    steps: list[dict[str, float]] = field(default_factory=list)  # where those seconds went
    started: float = field(default_factory=time.monotonic)

    def replicas(self) -> int:
        d = client.AppsV1Api(self.api).read_namespaced_deployment(WORKER, NS)
        return int(d.spec.replicas or 0)

    def live_pods(self) -> int:
        pods = (
            client.CoreV1Api(self.api)
            .list_namespaced_pod(NS, label_selector="app.kubernetes.io/component=worker")
            .items
        )
        return sum(1 for p in pods if not p.metadata.deletion_timestamp)

    def at_zero(self) -> bool:
        return self.replicas() == 0 and self.live_pods() == 0

    def wait_zero(self, timeout: float = 180) -> None:
        wait_for(self.at_zero, timeout=timeout, interval=0.5, message=self.describe)

    def describe(self) -> str:
        d = client.AppsV1Api(self.api).read_namespaced_deployment(WORKER, NS)
        return (
            f"the fleet at zero: {d.spec.replicas} replicas, {self.live_pods()} pods, "
            f"status {(d.metadata.annotations or {}).get('recall.dev/autoscaler')}"
        )

    def apply(self, name: str, n: int, seconds: float) -> float:
        """`kubectl apply` a Batch of `n` simulated jobs of about `seconds` each; returns the
        wall-clock time just before the apply."""
        chunks = max(1, round(seconds / 2))
        simulate = {"chunks": chunks, "chunkDelaySeconds": seconds / chunks}
        return apply_batch(self.cluster, NS, name, n, simulate)

    def jobs_of(self, batch: str) -> list[dict[str, Any]]:
        return jobs_of(self.kube, NS, batch)

    def first_claim(self, batch: str, applied: float) -> float:
        """Seconds from the apply to the first claim of the Batch (its jobs' startedAt)."""
        first = first_claim(self.kube, NS, batch, timeout=180)
        holder = next(
            str(((o.get("status") or {}).get("lease") or {}).get("holder") or "")
            for o in self.jobs_of(batch)
            if epoch(str((o.get("status") or {}).get("startedAt") or "1970-01-01")) == first
        )
        self.steps.append(self._steps(applied, first, holder))
        return first - applied

    def _worker_started(self, pod: str) -> float:
        """When the worker process in `pod` started its loop (its `worker_started` log line)."""
        out = self.cluster.run("kubectl", "logs", "-n", NS, pod, "-c", "worker", check=False)
        for line in out.stdout.splitlines():
            if '"worker_started"' in line:
                return epoch(str(json.loads(line)["timestamp"]))
        return float("nan")

    def _steps(self, applied: float, claimed: float, holder: str) -> dict[str, float]:
        """Seconds from the apply to the scale-up Event, the first new worker pod, its
        container running, the worker loop started, and the claim (the API server keeps
        the first three to the second)."""
        scaled = [
            epoch(str(e.get("lastTimestamp") or e.get("eventTime")))
            for e in self.kube.list_events(NS)
            if e.get("reason") == "ScaledUp"
        ]
        pods = (
            client.CoreV1Api(self.api)
            .list_namespaced_pod(NS, label_selector="app.kubernetes.io/component=worker")
            .items
        )
        created = [p.metadata.creation_timestamp.timestamp() for p in pods]
        running = [
            c.state.running.started_at.timestamp()
            for p in pods
            for c in p.status.container_statuses or []
            if c.state.running is not None
        ]

        def first(times: list[float]) -> float:
            after = [t for t in times if t >= int(applied)]
            return round(min(after) - applied, 1) if after else float("nan")

        return {
            "scaled": first(scaled),
            "pod_created": first(created),
            "container_running": first(running),
            "worker_started": round(self._worker_started(holder) - applied, 1) if holder else -1,
            "claimed": round(claimed - applied, 1),
        }

    def wait_done(self, batch: str, timeout: float = 300) -> list[dict[str, Any]]:
        return wait_done(self.kube, NS, batch, timeout)

    def scale_downs(self) -> list[str]:
        return [
            str(e.get("message"))
            for e in self.kube.list_events(NS)
            if e.get("reason") == "ScaledDown"
            and (e.get("involvedObject") or {}).get("name") == WORKER
        ]


def apply_batch(
    cluster: PodCluster,
    namespace: str,
    name: str,
    n: int,
    simulate: dict[str, Any],
    **defaults: Any,
) -> float:
    """`kubectl apply` a Batch of `n` simulated jobs (3 attempts, leases of 30 s, `defaults`);
    returns the wall-clock time just before the apply."""
    batch = {
        "apiVersion": API_VERSION,
        "kind": "Batch",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "defaults": {
                "leaseDurationSeconds": 30,
                "maxAttempts": 3,
                "engine": {"name": "simulated", "simulate": simulate},
                **defaults,
            },
            "items": [
                {"key": f"k{k}", "source": {"url": f"file:///media/{name}-{k}.wav"}}
                for k in range(n)
            ],
        },
    }
    before = time.time()
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(batch))
    return before


def jobs_of(kube: Kube, namespace: str, batch: str) -> list[dict[str, Any]]:
    return [
        o for o in kube.list_jobs(namespace).items if (o.get("spec") or {}).get("batchRef") == batch
    ]


def first_claim(kube: Kube, namespace: str, batch: str, timeout: float) -> float:
    """When the Batch's first job was claimed (the earliest startedAt), once one was."""

    def started() -> list[float]:
        times = [(o.get("status") or {}).get("startedAt") for o in jobs_of(kube, namespace, batch)]
        return [epoch(t) for t in times if t]

    return min(wait_for(started, timeout=timeout, interval=0.2, message=f"{batch} claimed"))


def wait_done(kube: Kube, namespace: str, batch: str, timeout: float) -> list[dict[str, Any]]:
    """The Batch's jobs, once it is complete."""

    def done() -> list[dict[str, Any]] | None:
        b = kube.get_batch(namespace, batch)
        return jobs_of(kube, namespace, batch) if b is not None and b.status.complete else None

    return wait_for(done, timeout=timeout, interval=1, message=f"Batch {batch} complete")


class Sampler(Protocol):
    stop: threading.Event

    def run(self) -> None: ...


@contextlib.contextmanager
def sampling(sampler: Sampler, name: str) -> Iterator[None]:
    """`sampler` running in a thread named `name` until the block ends."""
    thread = threading.Thread(target=sampler.run, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        sampler.stop.set()
        thread.join(5)


@contextlib.contextmanager
def sampled_release(
    cluster: PodCluster,
    release: str,
    namespace: str,
    values: dict[str, Any],
    tmp: Path,
    sampler: Sampler,
    name: str,
) -> Iterator[Path]:
    """The chart installed as `release` in `namespace` with `values` (written to a file in
    `tmp`, the path given) and its own results store, in an emptyDir (the main release's data
    stays its own), `sampler` running in a thread named `name` while it stands; uninstalled
    at the end."""
    path = tmp / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    install(
        cluster, release, namespace, "--values", str(path),
        "--set", "store.bundled.persistence.enabled=false",
    )  # fmt: skip
    try:
        with sampling(sampler, name):
            yield path
    finally:
        uninstall(cluster, release, namespace)


def interrupted(jobs: list[dict[str, Any]]) -> list[str]:
    """Jobs that were released or reclaimed (what a scale-down must never cause)."""
    return [
        o["metadata"]["name"]
        for o in jobs
        if int((o.get("status") or {}).get("releases") or 0)
        or int((o.get("status") or {}).get("expiredLeases") or 0)
    ]
