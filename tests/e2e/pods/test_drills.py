"""Drills on a kind cluster of three nodes: what clusters do to pods and nodes, done on purpose
while a Batch runs (`make e2e-kind`).

Its own release (`drill`, namespace `recall-drill`): the simulated engine (jobs of known
length), two operators kept off the control-plane node (one on each worker node), four workers
spread over the three nodes, both PodDisruptionBudgets on, the store on the control plane with
its volume there. Each drill applies a Batch, waits until jobs are in flight where the fault
will land, does the fault, waits for the Batch, checks the invariants that drill is about, and
writes its figures (tests/e2e/pods/drills.py: time until the jobs run again, leases reclaimed,
jobs released, duplicates, lost) to build/drills/. Every fault acts inside the docker network
or a node's own namespace, and is undone before the next drill (a killed node is started
again, a cut healed, a drained node uncordoned), so the drills run in file order on one
cluster and leave nothing behind.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from kubernetes import client

from recall.kube.store import KubeStore as Kube
from tests.e2e.pods.conftest import PodCluster, install, uninstall
from tests.e2e.pods.drills import Figures, Ledger, batch_manifest, figures
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1200)]

NS = "recall-drill"
RELEASE = "drill"
OPERATOR_LEASE = f"{RELEASE}-recall-operator"
WORKERS = 4
JOBS = 8
CHUNKS, CHUNK_SECONDS = 8, 1.5  # a job takes 12 s of engine time
LEASE = 12  # the workers' renew deadline is 2/3 of it: 8 s
RENEW_DEADLINE = LEASE * 2 / 3


def values(cluster: PodCluster) -> dict[str, Any]:
    off_control_plane = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/hostname",
                                "operator": "NotIn",
                                "values": [cluster.kind.control_plane],
                            }
                        ]
                    }
                ]
            }
        }
    }
    return {
        "engine": {"name": "simulated"},
        "operator": {
            "replicas": 2,
            "affinity": off_control_plane,
            "podDisruptionBudget": {"enabled": True, "minAvailable": 1},
            "leaderElection": {"leaseDuration": 10, "renewDeadline": 7, "retryPeriod": 1},
        },
        "worker": {
            "replicas": WORKERS,
            "graceSeconds": 20,  # a drained worker finishes its job (12 s) within its grace
            "podDisruptionBudget": {"enabled": True, "maxUnavailable": 1},
            "resources": {
                "requests": {"cpu": "100m", "memory": "128Mi", "ephemeral-storage": "64Mi"},
                "limits": {"cpu": "1", "memory": "512Mi", "ephemeral-storage": "256Mi"},
            },
        },
    }


@dataclass
class Drill:
    cluster: PodCluster
    kube: Kube
    api: client.ApiClient
    ledger: Ledger
    runs: int = 0

    # -- where things are -------------------------------------------------------------------

    def placement(self, component: str) -> dict[str, str]:
        """Pod name → node, for the running pods of a component that are not going away."""
        return {
            p["metadata"]["name"]: p["spec"].get("nodeName", "")
            for p in self.cluster.pods(component, NS)
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        }

    def leader(self) -> str:
        lease = client.CoordinationV1Api(self.api).read_namespaced_lease(OPERATOR_LEASE, NS)
        return str(lease.spec.holder_identity or "").rsplit("_", 1)[0]

    def ready(self) -> None:
        """Every worker and operator of the release running and ready, the store too."""

        def all_ready() -> bool:
            apps = client.AppsV1Api(self.api)
            for d in apps.list_namespaced_deployment(NS).items:
                if (d.status.ready_replicas or 0) < (d.spec.replicas or 0):
                    return False
                if (d.status.updated_replicas or 0) < (d.spec.replicas or 0):
                    return False
            return True

        wait_for(all_ready, timeout=300, interval=1, message="the release ready again")

    # -- a run ------------------------------------------------------------------------------

    def apply(self, name: str, n: int = JOBS, chunks: int = CHUNKS, lease: int = LEASE) -> str:
        self.runs += 1
        batch = batch_manifest(name, NS, n, chunks=chunks, seconds=CHUNK_SECONDS, lease=lease)
        self.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(batch))
        return name

    def in_flight_on(self, batch: str, nodes: set[str], at_least: int = 1) -> dict[str, str]:
        """Wait until `at_least` jobs of `batch` are leased, with a chunk done, by workers on
        `nodes`; returns job → holder of those."""
        workers = self.placement("worker")

        def found() -> dict[str, str] | None:
            held = {
                name: s.holder
                for name, s in self.ledger.last(batch).items()
                if s.phase == "Leased" and s.chunks >= 1 and workers.get(s.holder) in nodes
            }
            return held if len(held) >= at_least else None

        return wait_for(found, timeout=180, interval=0.2, message=f"{batch} in flight on {nodes}")

    def done(self, batch: str, timeout: float = 400) -> list[dict[str, Any]]:
        def complete() -> bool:
            b = self.kube.get_batch(NS, batch)
            return b is not None and b.status.complete

        wait_for(complete, timeout=timeout, interval=1, message=f"Batch {batch} complete")
        return [
            j
            for j in self.kube.list_jobs(NS).items
            if (j.get("spec") or {}).get("batchRef") == batch
        ]

    def worker_events(self, pod: str, event: str) -> list[dict[str, Any]]:
        out = self.cluster.run("kubectl", "logs", "-n", NS, pod, "-c", "worker", check=False)
        found = []
        for line in out.stdout.splitlines():
            if f'"{event}"' not in line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("event") == event:
                found.append(record)
        return found


@pytest.fixture(scope="module")
def drill(
    cluster: PodCluster, kube: Kube, api: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Drill]:
    path = tmp_path_factory.mktemp("drills") / "values.yaml"
    path.write_text(yaml.safe_dump(values(cluster)))
    install(cluster, RELEASE, NS, "--values", str(path))
    ledger = Ledger(kube, NS)
    thread = threading.Thread(target=ledger.run, name="drill-ledger", daemon=True)
    thread.start()
    d = Drill(cluster, kube, api, ledger)
    try:
        d.ready()
        yield d
    finally:
        ledger.stop.set()
        thread.join(5)
        kind = cluster.kind
        for node in kind.workers:  # whatever a failed drill left: undone
            kind.heal(node)
            cluster.run("kubectl", "uncordon", node, check=False)
            state = kind.docker.run(
                ["inspect", "--format", "{{.State.Running}}", node], capture=True, check=False
            )
            if state.stdout.strip() == "false":
                kind.start_node(node)
        uninstall(cluster, RELEASE, NS)


def check_clean(figures: Figures) -> None:
    figures.write()
    assert figures.lost == 0, f"jobs lost: {figures}"
    assert figures.duplicates == 0, f"two accepted results for a job: {figures}"


# -- the drills, in order ----------------------------------------------------------------------


def test_drill_1__the_control_planes_api_server_restarts_and_the_jobs_go_on(
    drill: Drill,
) -> None:
    """The API server's container is killed (the kubelet starts it again): every component
    retries; no lease expires (a 30 s lease: its renew deadline, 20 s, outlasts the restart;
    expiry is judged on the operator's own clock from the renewals it saw)."""
    batch = drill.apply("apiserver", lease=30)
    cluster = drill.cluster
    drill.in_flight_on(batch, set(cluster.kind.nodes), at_least=2)
    apiserver = f"kube-apiserver-{cluster.kind.control_plane}"
    pod = json.loads(cluster.kubectl("-n", "kube-system", "get", "pod", apiserver, "-o", "json"))
    container = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    fault = time.monotonic()
    cluster.kill_container(container)
    down = up = None
    while up is None:
        answered = cluster.run("kubectl", "get", "--raw", "/readyz", check=False).returncode == 0
        now = time.monotonic() - fault
        if not answered and down is None:
            down = now
        if answered and down is not None:
            up = now
        assert now < 180, "the API server did not come back"
        time.sleep(0.2)
    drill.done(batch)
    found = figures(drill.ledger, batch, "API server restart", fault, JOBS, unavailable=up)
    check_clean(found)
    assert found.reclaimed == 0, "a lease expired while the API server restarted"


STORE_OBJECTS = """
import json
from recall.base.settings import StoreSettings
from recall.bucket import Stores
results = Stores(StoreSettings()).results()
print(json.dumps({o.key: o.size for o in results.list("")}))
"""


def store_objects(drill: Drill) -> dict[str, int]:
    """Every object of the results store and its size (read from an operator pod)."""
    pod = next(iter(drill.placement("operator")))
    done = drill.cluster.run(
        "kubectl", "exec", "-n", NS, pod, "-c", "operator", "--", "python3", "-c", STORE_OBJECTS,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found: dict[str, int] = json.loads(done.stdout)
    return found


def test_drill_2__the_stores_pod_is_deleted_and_comes_back_on_its_volume(drill: Drill) -> None:
    """The bundled store's pod goes (a new one starts on the same node and claim): the jobs
    wait for it and go on; no object it held is lost."""
    batch = drill.apply("store")
    cluster = drill.cluster
    drill.in_flight_on(batch, set(cluster.kind.nodes), at_least=2)
    before = store_objects(drill)
    (store,) = cluster.pods("store", NS)
    fault = time.monotonic()
    cluster.kubectl("delete", "pod", "-n", NS, store["metadata"]["name"], "--wait=false")
    jobs = drill.done(batch)
    after = store_objects(drill)
    # Scratch objects of finished jobs are collected on purpose; what the results reference
    # (the accepted transcripts and their index) and what was kept must all be there.
    referenced = {str(j["status"]["result"]["transcript"]) for j in jobs}
    missing = [k for k in before if k not in after and not _collectable(k, referenced)]
    (new,) = [p for p in cluster.pods("store", NS) if not p["metadata"].get("deletionTimestamp")]
    found = figures(
        drill.ledger, batch, "store pod deleted", fault, JOBS,
        objects_before=len(before), objects_lost=len(missing),
        same_node=new["spec"]["nodeName"] == store["spec"]["nodeName"],
    )  # fmt: skip
    check_clean(found)
    assert not missing, f"objects the store lost: {missing[:10]}"
    assert not [k for k in referenced if k not in after], "an accepted transcript is gone"
    assert new["metadata"]["name"] != store["metadata"]["name"]


def _collectable(key: str, referenced: set[str]) -> bool:
    """An object the collector deletes on purpose once its job ended: an attempt's scratch
    that no accepted result names (checkpoints, chunks), or the operator's probe."""
    if key.endswith(".probe"):
        return True
    return key.startswith("scratch/") and key not in referenced


def test_drill_3__a_worker_node_is_cut_off_its_workers_stop_and_nothing_stale_lands(
    drill: Drill,
) -> None:
    """A worker node's own iptables drop everything to and from the rest of the cluster while
    its processes live on: its workers stop at their renew deadline; their jobs are reclaimed
    after the lease and finish elsewhere; when the network returns, none of their writes
    lands (the results stay the other attempts')."""
    cluster = drill.cluster
    leader_node = drill.placement("operator")[drill.leader()]
    target = next(n for n in cluster.kind.workers if n != leader_node)
    batch = drill.apply("cut")
    held = drill.in_flight_on(batch, {target})
    tokens = {job: s.token for job, s in drill.ledger.last(batch).items() if job in held}
    cut_pods = {p for p, n in drill.placement("worker").items() if n == target}
    fault, cut_at = time.monotonic(), dt.datetime.now(dt.UTC)
    cluster.kind.cut(target)
    try:
        jobs = drill.done(batch)
    finally:
        healed_at = dt.datetime.now(dt.UTC)
        cluster.kind.heal(target)
    time.sleep(LEASE)  # the cut workers had time to write, had they not stopped
    drill.ledger.sample()
    history = drill.ledger.of(batch)
    for job in held:
        status = next(j["status"] for j in jobs if j["metadata"]["name"] == job)
        assert status["phase"] == "Succeeded"
        assert status["result"]["worker"] not in cut_pods, f"{job}: a cut worker's result"
        assert int(status["expiredLeases"]) >= 1, f"{job} was not reclaimed"
        reclaimed = [s for s in history[job] if s.at > fault and s.token != tokens[job]]
        assert reclaimed, f"{job} never left the cut worker"
        again = [s for s in history[job] if s.at > reclaimed[0].at and s.token == tokens[job]]
        assert not again, f"{job}: the cut worker's lease came back"
    stopped = {}
    for pod in cut_pods:
        for record in drill.worker_events(pod, "lease_lost"):
            when = dt.datetime.fromisoformat(str(record["timestamp"]).replace("Z", "+00:00"))
            if record.get("job") in held and cut_at <= when <= healed_at:
                stopped[record["job"]] = (when - cut_at).total_seconds()
    assert set(stopped) == set(held), f"workers that did not stop during the cut: {stopped}"
    found = figures(
        drill.ledger, batch, "worker node cut off", fault, JOBS,
        stopped_after_seconds=max(stopped.values()), renew_deadline_seconds=RENEW_DEADLINE,
    )  # fmt: skip
    check_clean(found)
    assert max(stopped.values()) <= RENEW_DEADLINE + 5, f"stopped late: {stopped}"
    drill.ready()


def test_drill_4__a_worker_node_dies_its_jobs_are_reclaimed_and_finish_elsewhere(
    drill: Drill,
) -> None:
    """A worker node's container is killed: its pods are still shown Running for a while;
    their jobs are reclaimed after their lease and finish on other nodes; no result from the
    dead node is accepted. The node is started again afterwards."""
    cluster = drill.cluster
    leader_node = drill.placement("operator")[drill.leader()]
    target = next(n for n in cluster.kind.workers if n != leader_node)
    batch = drill.apply("node")
    held = drill.in_flight_on(batch, {target})
    dead = {p for p, n in drill.placement("worker").items() if n == target}
    fault = time.monotonic()
    cluster.kind.kill_node(target)
    try:
        jobs = drill.done(batch)
        shown = [p for p in cluster.pods("worker", NS) if p["metadata"]["name"] in dead]
    finally:
        cluster.kind.start_node(target)
    for job in jobs:
        name = job["metadata"]["name"]
        if name in held:
            assert job["status"]["result"]["worker"] not in dead, f"{name}: the dead node's result"
            assert int(job["status"]["expiredLeases"]) >= 1
    found = figures(
        drill.ledger, batch, "worker node killed", fault, JOBS,
        pods_still_shown_running=sum(1 for p in shown if p["status"].get("phase") == "Running"),
    )  # fmt: skip
    check_clean(found)
    assert found.back_seconds >= LEASE * 0.5, "reclaimed before the lease could expire"
    drill.ready()


def test_drill_5__the_active_operators_node_dies_the_standby_leads_and_the_batch_finishes(
    drill: Drill,
) -> None:
    cluster = drill.cluster
    batch = drill.apply("leader")
    drill.in_flight_on(batch, set(cluster.kind.nodes), at_least=2)
    leader = drill.leader()
    target = drill.placement("operator")[leader]
    fault = time.monotonic()
    cluster.kind.kill_node(target)
    try:
        new = wait_for(
            lambda: (name := drill.leader()) not in ("", leader) and name,
            timeout=120, interval=0.2, message="the standby to lead",
        )  # fmt: skip
        led_after = time.monotonic() - fault
        drill.done(batch)
    finally:
        cluster.kind.start_node(target)
    found = figures(
        drill.ledger, batch, "active operator's node killed", fault, JOBS,
        leader_after_seconds=round(led_after, 1), operator_lease_seconds=10,
    )  # fmt: skip
    check_clean(found)
    assert new != leader
    assert led_after <= 10 + 15, f"the standby led only after {led_after:.0f} s"
    drill.ready()


def test_drill_6__a_drain_with_the_disruption_budgets_releases_or_finishes_and_no_lease_expires(
    drill: Drill,
) -> None:
    """`kubectl drain` of the worker node with the most busy workers, PodDisruptionBudgets on:
    each evicted worker finishes or releases its job within its grace period; no lease
    expires; the Batch completes on the other nodes."""
    cluster = drill.cluster
    batch = drill.apply("drain", chunks=12)
    drill.in_flight_on(batch, set(cluster.kind.workers), at_least=2)
    workers = drill.placement("worker")
    busy: dict[str, int] = {}
    for s in drill.ledger.last(batch).values():
        if s.phase == "Leased" and workers.get(s.holder) in cluster.kind.workers:
            busy[workers[s.holder]] = busy.get(workers[s.holder], 0) + 1
    target = max(busy, key=lambda n: busy[n])
    fault = time.monotonic()
    try:
        cluster.run(
            "kubectl", "drain", target, "--ignore-daemonsets", "--delete-emptydir-data",
            "--timeout=300s",
        )  # fmt: skip
        drained = time.monotonic() - fault
        drill.done(batch)
    finally:
        cluster.run("kubectl", "uncordon", target, check=False)
    found = figures(
        drill.ledger, batch, "node drained", fault, JOBS, drain_seconds=round(drained, 1)
    )
    check_clean(found)
    assert found.reclaimed == 0, "a lease expired during the drain"
