"""Drills on a kind cluster of three nodes: what clusters do to pods and nodes, done on purpose
while a Batch runs (`make e2e-kind`).

Its own release (`drill`, namespace `recall-drill`): the simulated engine (jobs of known
length), two operators kept off the control-plane node (one on each worker node), four workers
spread over the three nodes, both PodDisruptionBudgets on, the store on the control plane with
its volume there. Each drill applies a Batch, waits until jobs are in flight where the fault
will land, does the fault, takes the fault's time once the fault is complete, waits for the
Batch, checks the invariants that drill is about, and writes its figures
(tests/e2e/pods/drills.py says what each one measures) to build/drills/. Every drill also
checks that no job is lost, that no job has a duplicate (two accepted results, a completion the
Batch counts twice, a results index entry of another attempt) and that every published results
index entry is in the store.

Leases: the API server drill's jobs have a 30 s lease (its renew deadline, 20 s, outlasts the
restart); every other drill's a 12 s lease (renew deadline 8 s). The operators' Lease is 10 s.

Every fault acts inside the docker network or a node's own namespace, and is undone before the
next drill (a killed node is started again, a cut healed, a drained node uncordoned), so the
drills run in file order on one cluster; each starts once the release is ready again (what an
earlier drill restarted or recreated running and ready). After each one,
`KindCluster.drill_leftovers` and the test process's children must show nothing left: every
node running, no other container, docker network or dangling volume of the cluster, no
RECALL-DRILL chain in a node, no node cordoned, no process the drill started.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from recall.kube.client import KubeClient as Kube
from recall_dev.kind import dangling_volumes
from tests.e2e.pods.conftest import SMALL_WORKER, PodCluster, install, uninstall
from tests.e2e.pods.drills import (
    Figures,
    Ledger,
    batch_manifest,
    epoch,
    figures,
    leases_of,
    reclaim_delays,
    stale_objects,
    target_node,
)
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1200)]

NS = "recall-drill"
RELEASE = "drill"
OPERATOR_LEASE = f"{RELEASE}-recall-operator"
OPERATOR_LEASE_SECONDS = 10
WORKERS = 4
JOBS = 8
CHUNKS, CHUNK_SECONDS = 8, 1.5  # a job takes 12 s of engine time
LEASE = 12  # the workers' renew deadline is 2/3 of it (RECALL_WORKER_RENEW_DEADLINE_FRACTION)
RENEW_DEADLINE = LEASE * 2 / 3
APISERVER_LEASE = 30
# How far past its renew deadline a cut worker may stop: its heartbeater wakes at the deadline;
# the rest is a busy machine. It must stay under the lease: a worker still going when its lease
# is reclaimed could write beside the next attempt.
STOP_SLACK = 2.0
assert RENEW_DEADLINE + STOP_SLACK < LEASE
# The standby reads the Lease every retryPeriod (1 s): it sees the last renewal up to a second
# late, and takes over at its first read after the Lease ran out on its own clock.
LEADER_SLACK = 3.0


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
            "leaderElection": {
                "leaseDuration": OPERATOR_LEASE_SECONDS,
                "renewDeadline": 7,
                "retryPeriod": 1,
            },
        },
        "worker": {
            "replicas": WORKERS,
            "graceSeconds": 20,  # a drained worker finishes its job (12 s) within its grace
            "podDisruptionBudget": {"enabled": True, "maxUnavailable": 1},
            "resources": SMALL_WORKER,
        },
    }


# Run in an operator pod (it has the results store's address and keys; nothing outside the
# cluster reaches the store).
READ_TOKENS = """
import json, sys
from recall.base.settings import StoreSettings
from recall.bucket import Stores
results = Stores(StoreSettings()).results()
found = {}
for key in json.loads(sys.argv[1]):
    raw = results.get(key)
    found[key] = json.loads(raw).get("token") if raw is not None else None
print(json.dumps(found))
"""
WATCH_SCRATCH = """
import json, sys, time
from recall.base.settings import StoreSettings
from recall.bucket import Stores
from recall.transcripts import namespace_prefix
results = Stores(StoreSettings()).results()
seen = {}
end = time.monotonic() + float(sys.argv[2])
while True:
    for o in results.list(namespace_prefix(sys.argv[1])):
        seen[o.key] = o.modified.isoformat()
    if time.monotonic() >= end:
        break
    time.sleep(0.5)
print(json.dumps(seen))
"""
# One process from before a cut until the Batch is done: it resolves the store's name and connects
# once, before the cut (a process started while a node is cut off may ask the cluster DNS pod on
# that node, which does not answer until the node controller drops it). It says "listed" after
# its first listing, lists every half second until the stop file exists, lists once more, and
# prints every object seen (key -> LastModified) with how many listings it made and failed.
WATCH_UNTIL_STOPPED = """
import json, os, sys, time
from recall.base.settings import StoreSettings
from recall.bucket import Stores
from recall.transcripts import namespace_prefix
results = Stores(StoreSettings()).results()
prefix, stop = namespace_prefix(sys.argv[1]), sys.argv[2]
end = time.monotonic() + float(sys.argv[3])
seen, listings, errors = {}, 0, []
while True:
    try:
        for o in results.list(prefix):
            seen[o.key] = o.modified.isoformat()
        listings += 1
        if listings == 1:
            print("listed", flush=True)
    except Exception as e:
        errors.append(repr(e)[:300])
    if os.path.exists(stop) or time.monotonic() >= end:
        break
    time.sleep(0.5)
if os.path.exists(stop):
    os.remove(stop)
print(json.dumps({"objects": seen, "listings": listings, "errors": errors}))
"""
STORE_OBJECTS = """
import json
from recall.base.settings import StoreSettings
from recall.bucket import Stores
results = Stores(StoreSettings()).results()
print(json.dumps({o.key: o.size for o in results.list("")}))
"""


class ScratchWatch:
    """The namespace's scratch objects listed every half second by one process in an operator
    pod (WATCH_UNTIL_STOPPED), from its start until `stop`: key -> LastModified of every object
    any listing saw. `close` ends the process if `stop` did not."""

    def __init__(self, cluster: PodCluster, pod: str, limit: float = 1200) -> None:
        self.cluster, self.pod = cluster, pod
        self.stop_file = f"/tmp/recall-drill-watch-{os.getpid()}-{time.monotonic_ns()}"
        self.listings, self.errors = 0, 0
        fd, path = tempfile.mkstemp(prefix="recall-drill-watch-", suffix=".stderr")
        self._stderr = Path(path)
        self._lines: queue.Queue[str | None] = queue.Queue()
        with os.fdopen(fd, "w") as stderr:
            self._proc = subprocess.Popen(
                [str(cluster.bin_dir / "kubectl"), "exec", "-n", NS, pod, "-c", "operator", "--",
                 "python3", "-c", WATCH_UNTIL_STOPPED, NS, self.stop_file, str(limit)],
                stdout=subprocess.PIPE, stderr=stderr, text=True,
                env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
            )  # fmt: skip
        self._reader = threading.Thread(target=self._read, name="scratch-watch", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _next(self, timeout: float) -> str:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"the store watch in {self.pod}: nothing for {timeout} s"
            ) from None
        if line is None:
            said = self._stderr.read_text()[-2000:]
            raise AssertionError(f"the store watch in {self.pod} ended: {said}")
        return line

    def started(self, timeout: float = 120) -> None:
        """Returns once the process listed the store a first time."""
        line = self._next(timeout)
        assert line.strip() == "listed", f"the store watch in {self.pod} said {line!r}"

    def stop(self, timeout: float = 120) -> dict[str, str]:
        """Every object seen from the start to a listing made after this was called."""
        stop = f"open({self.stop_file!r}, 'w').close()"
        self.cluster.run("kubectl", "exec", "-n", NS, self.pod, "-c", "operator", "--",
                         "python3", "-c", stop)  # fmt: skip
        found = json.loads(self._next(timeout))
        self._proc.wait(timeout)
        self.listings, self.errors = int(found["listings"]), len(found["errors"])
        objects: dict[str, str] = found["objects"]
        return objects

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._reader.join(5)
        self._stderr.unlink(missing_ok=True)


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

    def leader_node(self) -> str:
        """The node of the leading operator, once the Lease names a running operator pod (an
        earlier drill's failover may leave it naming a pod that is gone, for a moment)."""
        return wait_for(
            lambda: self.placement("operator").get(self.leader()), timeout=120, interval=1,
            message="a running operator leading",
        )  # fmt: skip

    def target(self) -> tuple[str, set[str]]:
        """The worker node a drill takes away (`target_node`: not the leading operator's, with
        workers of the release) and the release's workers on it."""
        workers = self.placement("worker")
        node = target_node(workers, self.cluster.kind.workers, self.leader_node())
        return node, {pod for pod, at in workers.items() if at == node}

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

    # -- the results store, through an operator pod -------------------------------------------

    def in_operator(self, script: str, *args: str) -> str:
        """`python3 -c script args` in the leading operator's pod (its node is never the one a
        drill took away), else in another running one."""
        running = self.placement("operator")
        leader = self.leader()
        pod = leader if leader in running else next(iter(running))
        done = self.cluster.run(
            "kubectl", "exec", "-n", NS, pod, "-c", "operator", "--", "python3", "-c", script,
            *args, check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"in {pod}: {done.stderr[-2000:]}"
        return done.stdout

    def store_objects(self) -> dict[str, int]:
        """Every object of the results store and its size."""
        found: dict[str, int] = json.loads(self.in_operator(STORE_OBJECTS))
        return found

    def watch_scratch(self) -> ScratchWatch:
        """A `ScratchWatch` in the leading operator's pod, once it listed the store a first
        time (drill 3 takes the node of neither that operator nor the store away)."""
        leader = self.leader()
        assert leader in self.placement("operator"), f"the leader {leader!r} is not running"
        watch = ScratchWatch(self.cluster, leader)
        try:
            watch.started()
        except BaseException:
            watch.close()
            raise
        return watch

    def scratch(self, seconds: float = 0) -> dict[str, str]:
        """The scratch objects of the namespace (key → LastModified), listed every half second
        for `seconds` (once for 0): every object seen in any listing."""
        found: dict[str, str] = json.loads(self.in_operator(WATCH_SCRATCH, NS, str(seconds)))
        return found

    def index_entries(self, batch: str) -> dict[str, str | None]:
        """The results index entries of the Batch's jobs (key → the lease token in the entry,
        None when missing), read once every Succeeded job of it says where it was published."""

        def published() -> list[str] | None:
            self.ledger.sample()
            keys = [s.published for s in self.ledger.last(batch).values() if s.phase == "Succeeded"]
            return keys if keys and all(keys) else None

        keys = wait_for(published, timeout=120, interval=1, message=f"{batch} published")
        found: dict[str, str | None] = json.loads(self.in_operator(READ_TOKENS, json.dumps(keys)))
        return found

    # -- a run ------------------------------------------------------------------------------

    def apply(self, name: str, n: int = JOBS, chunks: int = CHUNKS, lease: int = LEASE) -> str:
        self.runs += 1
        batch = batch_manifest(name, NS, n, chunks=chunks, seconds=CHUNK_SECONDS, lease=lease)
        self.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(batch))
        return name

    def in_flight_on(
        self, batch: str, nodes: set[str], at_least: int = 1, most_chunks: int = CHUNKS
    ) -> dict[str, str]:
        """Wait until `at_least` jobs of `batch` are leased, with 1 to `most_chunks` chunks
        done, by workers on `nodes`; returns job → holder of those."""
        workers = self.placement("worker")

        def found() -> dict[str, str] | None:
            held = {
                name: s.holder
                for name, s in self.ledger.last(batch).items()
                if s.phase == "Leased"
                and 1 <= s.chunks <= most_chunks
                and workers.get(s.holder) in nodes
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
        return self.cluster.worker_events(NS, pod, event)


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


def children() -> set[str]:
    """This process's child processes ("pid command"), read from /proc."""
    me = str(os.getpid())
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        # "pid (command) state ppid ...": the command may hold spaces, what follows it none.
        head, _, rest = text.rpartition(")")
        fields = rest.split()
        if len(fields) > 1 and fields[1] == me:
            found.add(head.replace(" (", " ", 1))
    return found


@pytest.fixture(autouse=True)
def nothing_left(drill: Drill) -> Iterator[None]:
    """Before each drill, the release ready (an earlier drill's restarted or recreated pods
    running and ready again); after it, nothing of it left in the cluster, in docker or among
    this process's children (module doc)."""
    drill.ready()
    kind = drill.cluster.kind
    volumes, processes = dangling_volumes(kind.docker), children()
    yield
    left = kind.drill_leftovers(volumes)
    left += [f"process {p}" for p in sorted(children() - processes)]
    assert not left, f"the drill left behind: {left}"


def check_clean(found: Figures) -> None:
    found.write()
    assert found.lost == 0, f"jobs lost: {found}"
    assert found.duplicates == 0, f"duplicates: {found.notes['duplicates_by']}: {found}"
    missing = found.notes.get("index_entries_missing")
    assert not missing, f"published results index entries gone from the store: {missing}"


# -- the drills, in order ----------------------------------------------------------------------


def test_drill_1__the_control_planes_api_server_restarts_and_the_jobs_go_on(
    drill: Drill,
) -> None:
    """The API server's container is killed (the kubelet starts it again): every component
    retries; no lease expires (a 30 s lease: its renew deadline, 20 s, outlasts the restart;
    expiry is judged on the operator's own clock from the renewals it saw)."""
    batch = drill.apply("apiserver", lease=APISERVER_LEASE)
    cluster = drill.cluster
    drill.in_flight_on(batch, set(cluster.kind.nodes), at_least=2)
    apiserver = f"kube-apiserver-{cluster.kind.control_plane}"
    pod = json.loads(cluster.kubectl("-n", "kube-system", "get", "pod", apiserver, "-o", "json"))
    container = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    cluster.kill_container(container)
    fault = time.monotonic()
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
    found = figures(
        drill.ledger, batch, "API server restart", fault, JOBS, lease=APISERVER_LEASE,
        ended_at=fault + up, index=drill.index_entries(batch), unavailable=up,
    )  # fmt: skip
    check_clean(found)
    assert found.reclaimed == 0, "a lease expired while the API server restarted"


def _new_store_ready(drill: Drill, gone: str) -> dict[str, Any] | None:
    for pod in drill.cluster.pods("store", NS):
        meta, status = pod["metadata"], pod.get("status") or {}
        if meta["name"] == gone or meta.get("deletionTimestamp"):
            continue
        conditions = status.get("conditions") or []
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            return pod
    return None


def test_drill_2__the_stores_pod_is_deleted_and_comes_back_on_its_volume(drill: Drill) -> None:
    """The bundled store's pod goes (a new one starts on the same node and claim): the jobs
    wait for it and go on; no object it held is lost."""
    batch = drill.apply("store")
    cluster = drill.cluster
    drill.in_flight_on(batch, set(cluster.kind.nodes), at_least=2)
    before = drill.store_objects()
    (store,) = cluster.pods("store", NS)
    gone = store["metadata"]["name"]
    cluster.kubectl("delete", "pod", "-n", NS, gone, "--wait=false")
    fault = time.monotonic()
    new = wait_for(
        lambda: _new_store_ready(drill, gone), timeout=240, interval=0.5,
        message="a new store pod ready",
    )  # fmt: skip
    ready = time.monotonic()
    jobs = drill.done(batch)
    after = drill.store_objects()
    # Scratch objects of finished jobs are collected on purpose; what the results reference
    # (the accepted transcripts and their index) and what was kept must all be there.
    referenced = {str(j["status"]["result"]["transcript"]) for j in jobs}
    missing = [k for k in before if k not in after and not _collectable(k, referenced)]
    found = figures(
        drill.ledger, batch, "store pod deleted", fault, JOBS, lease=LEASE, ended_at=ready,
        index=drill.index_entries(batch), store_ready_seconds=round(ready - fault, 1),
        objects_before=len(before), objects_lost=len(missing),
        same_node=new["spec"]["nodeName"] == store["spec"]["nodeName"],
    )  # fmt: skip
    check_clean(found)
    assert not missing, f"objects the store lost: {missing[:10]}"
    assert not [k for k in referenced if k not in after], "an accepted transcript is gone"


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
    its processes live on: its workers stop at their renew deadline (the lease's last renewal
    + 8 s, at most STOP_SLACK later, read from their own lease_lost lines); their jobs are
    reclaimed no sooner than the lease after that renewal and finish elsewhere; when the
    network returns, nothing of theirs lands: no lease of theirs comes back in etcd, no result
    is theirs, and the store gets no object of their attempts written after their renew
    deadline (listed while cut, then every half second for a lease after the network
    returned)."""
    kind = drill.cluster.kind
    target, cut_pods = drill.target()
    # Everything slow comes before the jobs are chosen: the cut's rules, and the one process
    # that lists the store from before the cut until the Batch is done. Between the choice and
    # the cut there is one `docker exec`, so a busy machine cannot let a chosen job finish first.
    rules = kind.cut_rules(target)
    watch = drill.watch_scratch()
    try:
        batch = drill.apply("cut")
        # 6 s of engine time left at least (a checkpoint names a chunk a second late at most)
        held = drill.in_flight_on(batch, {target}, most_chunks=CHUNKS - 4)
        tokens = {job: s.token for job, s in drill.ledger.last(batch).items() if job in held}
        started, started_wall = time.monotonic(), time.time()
        kind.cut(target, rules)
        fault = time.monotonic()
        try:
            jobs = drill.done(batch)
            # every lease the cut workers held from just before the cut: token → last renewal
            theirs = leases_of(drill.ledger.of(batch), cut_pods, since=started - 1)
            # What their attempts stored, listed before the network returned (the operator
            # collects it once their jobs moved on; nothing of theirs can land while cut).
            while_cut = watch.stop()
        finally:
            healed_wall = time.time()
            kind.heal(target)
    finally:
        watch.close()
    after_heal = drill.scratch(LEASE)  # had they not stopped, they had a lease's time to write
    drill.ledger.sample()
    history = drill.ledger.of(batch)
    deadlines = {token: renewed + RENEW_DEADLINE for token, renewed in theirs.items()}
    stale = stale_objects(while_cut, after_heal, deadlines, cut_at=started_wall)
    listed = {**while_cut, **after_heal}
    delays = reclaim_delays(history, fault, held)
    for job in held:
        status = next(j["status"] for j in jobs if j["metadata"]["name"] == job)
        assert status["phase"] == "Succeeded"
        assert status["result"]["worker"] not in cut_pods, f"{job}: a cut worker's result"
        assert int(status["expiredLeases"]) >= 1, f"{job} was not reclaimed"
        reclaimed = [s for s in history[job] if s.at > fault and s.token != tokens[job]]
        assert reclaimed, f"{job} never left the cut worker"
        again = [s for s in history[job] if s.at > reclaimed[0].at and s.token == tokens[job]]
        assert not again, f"{job}: the cut worker's lease came back"
    stopped: dict[str, float] = {}  # job → seconds from its lease's last renewal to the stop
    reasons: dict[str, str] = {}
    for pod in cut_pods:
        for record in drill.worker_events(pod, "lease_lost"):
            job, when = str(record.get("job")), epoch(record.get("timestamp"))
            if job in held and started_wall <= when <= healed_wall:
                stopped[job] = when - theirs[tokens[job]]
                reasons[job] = str(record.get("reason"))
    assert set(stopped) == set(held), f"workers that did not stop during the cut: {stopped}"
    assert set(delays) == set(held), f"reclaims seen: {delays} of {held}"
    found = figures(
        drill.ledger, batch, "worker node cut off", fault, JOBS, lease=LEASE, moved=held,
        index=drill.index_entries(batch),
        stopped_after_renewal_seconds=round(max(stopped.values()), 1),
        renew_deadline_seconds=RENEW_DEADLINE, stale_store_writes=len(stale),
        their_objects_listed=sum(1 for k in listed if any(t in k for t in theirs)),
        their_objects_at_the_cut=sum(1 for k in while_cut if any(t in k for t in theirs)),
        store_listings_while_cut=watch.listings, store_listings_failed=watch.errors,
        reclaimed_after_renewal_seconds=[round(min(delays.values()), 1),
                                         round(max(delays.values()), 1)],
    )  # fmt: skip
    check_clean(found)
    assert set(reasons.values()) == {"RenewDeadline"}, f"why they stopped: {reasons}"
    late = {job: round(s - RENEW_DEADLINE, 2) for job, s in stopped.items()}
    assert max(late.values()) <= STOP_SLACK, f"seconds past the renew deadline: {late}"
    assert not stale, f"store objects the cut workers wrote after their renew deadline: {stale}"
    assert found.notes["their_objects_at_the_cut"] > 0, "the store check saw none of theirs"
    assert min(delays.values()) >= LEASE, f"reclaimed before the lease expired: {delays}"
    drill.ready()


def test_drill_4__a_worker_node_dies_its_jobs_are_reclaimed_and_finish_elsewhere(
    drill: Drill,
) -> None:
    """A worker node's container is killed: its pods are still shown Running for a while;
    their jobs are reclaimed no sooner than their lease after their last renewal and finish on
    other nodes; no result from the dead node is accepted. The node is started again
    afterwards."""
    cluster = drill.cluster
    target, dead = drill.target()
    batch = drill.apply("node")
    held = drill.in_flight_on(batch, {target}, most_chunks=CHUNKS - 3)
    cluster.kind.kill_node(target)
    fault = time.monotonic()
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
    delays = reclaim_delays(drill.ledger.of(batch), fault, held)
    assert set(delays) == set(held), f"reclaims seen: {delays} of {held}"
    found = figures(
        drill.ledger, batch, "worker node killed", fault, JOBS, lease=LEASE, moved=held,
        index=drill.index_entries(batch),
        pods_still_shown_running=sum(1 for p in shown if p["status"].get("phase") == "Running"),
        reclaimed_after_renewal_seconds=[round(min(delays.values()), 1),
                                         round(max(delays.values()), 1)],
    )  # fmt: skip
    check_clean(found)
    assert min(delays.values()) >= LEASE, f"reclaimed before the lease expired: {delays}"
    drill.ready()


def test_drill_5__the_active_operators_node_dies_the_standby_leads_and_the_batch_finishes(
    drill: Drill,
) -> None:
    """The node of the leading operator is killed: the standby leads within its Lease (10 s,
    plus LEADER_SLACK) and the Batch finishes; the jobs in flight on that node, if any, are
    reclaimed by the new leader no sooner than their lease after their last renewal."""
    cluster = drill.cluster
    batch = drill.apply("leader")
    drill.in_flight_on(batch, set(cluster.kind.nodes), at_least=2)
    leader = drill.leader()
    target = drill.placement("operator")[leader]
    on_target = {p for p, n in drill.placement("worker").items() if n == target}
    cluster.kind.kill_node(target)
    fault = time.monotonic()
    try:
        new = wait_for(
            lambda: (name := drill.leader()) not in ("", leader) and name,
            timeout=120, interval=0.2, message="the standby to lead",
        )  # fmt: skip
        led = time.monotonic()
        drill.done(batch)
    finally:
        cluster.kind.start_node(target)
    final = drill.ledger.last(batch)
    # In flight on the dead node: leased there at the fault, and not finished by that lease
    # (a sample is up to half a second old: a job may have completed just before the kill).
    moved = {
        job
        for job, s in drill.ledger.at(batch, fault).items()
        if s.phase == "Leased" and s.holder in on_target and s.token not in final[job].result
    }
    delays = reclaim_delays(drill.ledger.of(batch), fault, moved)
    found = figures(
        drill.ledger, batch, "active operator's node killed", fault, JOBS, lease=LEASE,
        moved=moved, ended_at=led, index=drill.index_entries(batch),
        leader_after_seconds=round(led - fault, 1),
        operator_lease_seconds=OPERATOR_LEASE_SECONDS,
        **({"reclaimed_after_renewal_seconds": [round(min(delays.values()), 1),
                                                round(max(delays.values()), 1)]}
           if delays else {}),
    )  # fmt: skip
    check_clean(found)
    assert new != leader
    led_after = led - fault
    assert led_after <= OPERATOR_LEASE_SECONDS + LEADER_SLACK, f"the standby led after {led_after}"
    assert set(delays) == moved, f"reclaims seen: {delays} of {moved}"
    assert not delays or min(delays.values()) >= LEASE, f"reclaimed before the lease: {delays}"
    drill.ready()


def test_drill_6__a_drain_with_the_disruption_budgets_releases_or_finishes_and_no_lease_expires(
    drill: Drill,
) -> None:
    """`kubectl drain` of the worker node with the most busy workers, PodDisruptionBudgets on:
    each evicted worker finishes or releases its job within its grace period; no lease
    expires; the Batch completes on the other nodes."""
    cluster = drill.cluster
    batch = drill.apply("drain", chunks=12)
    drill.in_flight_on(batch, set(cluster.kind.workers), at_least=2, most_chunks=12)
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
        drained = time.monotonic()
        drill.done(batch)
    finally:
        cluster.run("kubectl", "uncordon", target, check=False)
    found = figures(
        drill.ledger, batch, "node drained", fault, JOBS, lease=LEASE, ended_at=drained,
        index=drill.index_entries(batch), drain_seconds=round(drained - fault, 1),
    )  # fmt: skip
    check_clean(found)
    assert found.reclaimed == 0, "a lease expired during the drain"
