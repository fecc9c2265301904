"""Workers that scale with the work, on the real node: the chart's built-in autoscaler with real
pods, a real ReplicaSet and kubelet (`make e2e`).

Its own release (`scale`, namespace `recall-scale`: simulated engine, two operators, at most
four workers, a short cooldown, one worker per scale-down step), after the main release of
test_pods.py is gone. The tests run in order and share what a recorder samples every half
second: the Deployment's count, the running worker pods, the leased jobs.

- `helm upgrade` turning autoscaling on keeps the fleet; with nothing to do it goes to zero;
- a Batch applied with zero workers starts them, they finish it, and the fleet goes back to
  zero after the cooldown (the time from `kubectl apply` to the first claim is measured);
- a second Batch arriving during the scale-down is picked up;
- a hard-killed leading operator, in the middle of a scale-down, neither loses nor doubles
  workers: the standby takes over and goes on from what the API server says;
- over at least 20 scale-downs, no job is released or reclaimed: no scale-down stops a busy
  worker (DESIGN §5, invariant 11). The idle worker-seconds are compared with a fixed fleet of
  the same maximum over the same time, for the same work.

Imported by test_pods.py (one file: one node, one pytest-xdist process), after its tests.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from recall.kube.store import KubeStore as Kube
from recall.resources import API_VERSION, Phase
from tests.e2e.pods.conftest import CHART, PodCluster, release_values
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1800)]

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
        "resources": {
            "requests": {"cpu": "50m", "memory": "128Mi", "ephemeral-storage": "64Mi"},
            "limits": {"cpu": "500m", "memory": "512Mi", "ephemeral-storage": "256Mi"},
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
        batch = {
            "apiVersion": API_VERSION,
            "kind": "Batch",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "defaults": {
                    "leaseDurationSeconds": 30,
                    "maxAttempts": 3,
                    "engine": {
                        "name": "simulated",
                        "simulate": {"chunks": chunks, "chunkDelaySeconds": seconds / chunks},
                    },
                },
                "items": [
                    {"key": f"k{k}", "source": {"url": f"file:///media/{name}-{k}.wav"}}
                    for k in range(n)
                ],
            },
        }
        before = time.time()
        self.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(batch))
        return before

    def jobs_of(self, batch: str) -> list[dict[str, Any]]:
        return [
            o
            for o in self.kube.list_jobs(NS).items
            if (o.get("spec") or {}).get("batchRef") == batch
        ]

    def first_claim(self, batch: str, applied: float) -> float:
        """Seconds from the apply to the first claim of the Batch (its jobs' startedAt)."""

        def started() -> list[float]:
            times = [(o.get("status") or {}).get("startedAt") for o in self.jobs_of(batch)]
            return [_epoch(t) for t in times if t]

        first = min(wait_for(started, timeout=180, interval=0.2, message=f"{batch} claimed"))
        holder = next(
            str(((o.get("status") or {}).get("lease") or {}).get("holder") or "")
            for o in self.jobs_of(batch)
            if _epoch(str((o.get("status") or {}).get("startedAt") or "1970-01-01")) == first
        )
        self.steps.append(self._steps(applied, first, holder))
        return first - applied

    def _worker_started(self, pod: str) -> float:
        """When the worker process in `pod` started its loop (its `worker_started` log line)."""
        out = self.cluster.run("kubectl", "logs", "-n", NS, pod, "-c", "worker", check=False)
        for line in out.stdout.splitlines():
            if '"worker_started"' in line:
                return _epoch(str(json.loads(line)["timestamp"]))
        return float("nan")

    def _steps(self, applied: float, claimed: float, holder: str) -> dict[str, float]:
        """Seconds from the apply to the scale-up Event, the first new worker pod, its
        container running, the worker loop started, and the claim (the API server keeps
        the first three to the second)."""
        scaled = [
            _epoch(str(e.get("lastTimestamp") or e.get("eventTime")))
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
        def done() -> list[dict[str, Any]] | None:
            b = self.kube.get_batch(NS, batch)
            return self.jobs_of(batch) if b is not None and b.status.complete else None

        return wait_for(done, timeout=timeout, interval=1, message=f"Batch {batch} complete")

    def scale_downs(self) -> list[str]:
        return [
            str(e.get("message"))
            for e in self.kube.list_events(NS)
            if e.get("reason") == "ScaledDown"
            and (e.get("involvedObject") or {}).get("name") == WORKER
        ]


def _epoch(value: str) -> float:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def interrupted(jobs: list[dict[str, Any]]) -> list[str]:
    """Jobs that were released or reclaimed (what a scale-down must never cause)."""
    return [
        o["metadata"]["name"]
        for o in jobs
        if int((o.get("status") or {}).get("releases") or 0)
        or int((o.get("status") or {}).get("expiredLeases") or 0)
    ]


@pytest.fixture(scope="module")
def scaling(
    cluster: PodCluster, kube: Kube, api: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Scaling]:
    from recall_dev.crds import install_crds

    install_crds(str(cluster.kubeconfig))  # kept by the main release's uninstall, or new
    values = tmp_path_factory.mktemp("scaling") / "values.yaml"
    values.write_text(yaml.safe_dump(VALUES))
    cluster.run(
        "helm", "install", RELEASE, str(CHART), "--namespace", NS, "--create-namespace",
        *release_values(cluster), "--values", str(values), "--set", "crds.install=false",
        "--wait", "--timeout", "5m",
    )  # fmt: skip
    recorder = Recorder(api, kube)
    thread = threading.Thread(target=recorder.run, name="fleet-recorder", daemon=True)
    thread.start()
    try:
        yield Scaling(cluster, kube, api, recorder, values)
    finally:
        recorder.stop.set()
        thread.join(5)
        cluster.run("helm", "uninstall", RELEASE, "--namespace", NS, "--wait", check=False)
        cluster.run("kubectl", "delete", "namespace", NS, "--wait=false", check=False)


# -- the tests, in order -----------------------------------------------------------------------


def test_scaling_1__turning_builtin_on_mid_work_keeps_the_fleet_then_it_idles_to_zero(
    scaling: Scaling,
) -> None:
    """Both fixed workers hold a long job when `helm upgrade` turns autoscaling on: the same two
    pods finish their jobs (a reset to one replica would have removed one), then the fleet
    goes to zero."""
    assert scaling.replicas() == 2
    scaling.apply("upgrade", 2, seconds=30)
    wait_for(lambda: len(leased_jobs(scaling.kube)) == 2, timeout=120, interval=0.2,
             message="both workers busy")  # fmt: skip
    holders = {o["status"]["lease"]["holder"] for o in leased_jobs(scaling.kube)}
    upgraded = time.monotonic()
    scaling.cluster.run(
        "helm", "upgrade", RELEASE, str(CHART), "--namespace", NS, "--reuse-values",
        "--set", "worker.autoscaling.mode=builtin", "--wait", "--timeout", "5m",
    )  # fmt: skip
    jobs = scaling.wait_done("upgrade")
    assert {o["status"]["result"]["worker"] for o in jobs} == holders, "the same pods finished"
    assert interrupted(jobs) == []
    assert min(s.replicas for s in scaling.recorder.since(upgraded)[:20]) == 2
    scaling.wait_zero()
    downs = scaling.scale_downs()
    assert downs and downs[-1].startswith("1 → 0 workers"), downs


def test_scaling_2__a_batch_applied_with_zero_workers_starts_them_and_they_finish_it(
    scaling: Scaling,
) -> None:
    assert scaling.at_zero()
    applied = scaling.apply("from-zero", 3, seconds=6)
    scaling.first_claims.append(scaling.first_claim("from-zero", applied))
    jobs = scaling.wait_done("from-zero")
    assert {(o.get("status") or {}).get("phase") for o in jobs} == {Phase.SUCCEEDED.value}
    assert interrupted(jobs) == []
    scaling.wait_zero()


def test_scaling_3__a_second_batch_during_the_scale_down_is_picked_up(scaling: Scaling) -> None:
    scaling.apply("first", 4, seconds=4)
    scaling.wait_done("first")
    downs = len(scaling.scale_downs())
    wait_for(lambda: len(scaling.scale_downs()) > downs, timeout=120, interval=0.2,
             message="the first scale-down")  # fmt: skip
    assert scaling.replicas() > 0, "still on its way down"
    marked = time.monotonic()
    scaling.apply("second", 3, seconds=4)
    jobs = scaling.wait_done("second")
    assert {(o.get("status") or {}).get("phase") for o in jobs} == {Phase.SUCCEEDED.value}
    assert interrupted(scaling.jobs_of("first") + jobs) == []
    later = scaling.recorder.since(marked)
    assert max(s.replicas for s in later) <= MAX
    scaling.wait_zero()


def leader(scaling: Scaling) -> str:
    """The leading operator's identity (`<pod>_<suffix>`), or "" while none leads."""
    lease = client.CoordinationV1Api(scaling.api).read_namespaced_lease(
        f"{RELEASE}-recall-operator", NS
    )
    return str(lease.spec.holder_identity or "")


def test_scaling_4__an_operator_failover_during_scaling_neither_loses_nor_doubles_workers(
    scaling: Scaling,
) -> None:
    marked = time.monotonic()
    scaling.apply("failover-long", 2, seconds=24)
    scaling.apply("failover-short", 3, seconds=4)
    scaling.wait_done("failover-short")
    downs = len(scaling.scale_downs())
    wait_for(lambda: len(scaling.scale_downs()) > downs, timeout=120, interval=0.2,
             message="a scale-down while the long jobs run")  # fmt: skip
    victim = leader(scaling)
    pod_name = victim.rsplit("_", 1)[0]
    pod = json.loads(scaling.cluster.kubectl("get", "pod", "-n", NS, pod_name, "-o", "json"))
    (container,) = [c for c in pod["status"]["containerStatuses"] if c["name"] == "operator"]
    scaling.cluster.kill_container(container["containerID"].split("://", 1)[1])
    wait_for(lambda: leader(scaling) not in ("", victim), timeout=60, interval=0.5,
             message="another operator to lead")  # fmt: skip
    jobs = scaling.wait_done("failover-long")
    scaling.wait_zero()
    during = scaling.recorder.since(marked)
    assert max(s.replicas for s in during) <= MAX, "no worker doubled"
    assert max(s.running for s in during) <= MAX
    assert interrupted(jobs + scaling.jobs_of("failover-short")) == [], "no worker lost"
    assert {(o.get("status") or {}).get("phase") for o in jobs} == {Phase.SUCCEEDED.value}


def test_scaling_5__twenty_scale_downs_stop_no_busy_worker(scaling: Scaling) -> None:
    """Waves from zero (each one more measure of the first claim) of jobs of different lengths,
    so workers go while others still work; until at least 20 scale-downs were made."""
    wave = 0
    while len(scaling.scale_downs()) < 20 or wave < 3:
        wave += 1
        assert wave <= 8, f"only {len(scaling.scale_downs())} scale-downs after {wave - 1} waves"
        scaling.wait_zero()
        applied = scaling.apply(f"wave-{wave}-short", 2, seconds=4)
        scaling.apply(f"wave-{wave}-long", 2, seconds=14)
        scaling.first_claims.append(scaling.first_claim(f"wave-{wave}-short", applied))
        scaling.wait_done(f"wave-{wave}-short")
        scaling.wait_done(f"wave-{wave}-long")
    scaling.wait_zero()
    every = scaling.kube.list_jobs(NS).items
    downs = scaling.scale_downs()
    samples = scaling.recorder.samples
    busy = idle = 0.0
    for a, b in itertools.pairwise(samples):
        busy += a.leased * (b.at - a.at)
        idle += max(0, a.running - a.leased) * (b.at - a.at)
    window = samples[-1].at - samples[0].at
    report = {
        "scale_downs": len(downs),
        "jobs": len(every),
        "jobs_released_or_reclaimed": len(interrupted(every)),
        "first_claim_from_zero_seconds": {
            "n": len(scaling.first_claims),
            "min": round(min(scaling.first_claims), 2),
            "median": round(statistics.median(scaling.first_claims), 2),
            "max": round(max(scaling.first_claims), 2),
        },
        "first_claim_steps_median_seconds": {
            key: statistics.median(step[key] for step in scaling.steps)
            for key in ("scaled", "pod_created", "container_running", "worker_started", "claimed")
        },
        "window_seconds": round(window),
        "busy_worker_seconds": round(busy),
        "idle_worker_seconds_autoscaled": round(idle),
        f"idle_worker_seconds_fixed_{MAX}": round(MAX * window - busy),
    }
    print(f"\nautoscaling figures: {json.dumps(report)}")
    assert interrupted(every) == [], "a scale-down stopped a busy worker"
    assert len(downs) >= 20
    assert idle < MAX * window - busy
