"""The API server is the whole cluster's: flooded by other clients while recall works, it turns
the flood away (API Priority and Fairness, with the chart's FlowSchemas and priority levels),
no live worker's lease expires, nothing is lost, and throughput falls and comes back.

A control plane of its own, with few seats (`--max-requests-inflight`, as a busy cluster has
few to spare), so that APF queues and rejects at a flood one test process can make. The
operator and the workers run as their ServiceAccounts (an admin is exempt from APF); the flood
is another ServiceAccount patching ConfigMaps from hundreds of connections at once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from recall.bucket import Bucket
from recall.kube.store import KubeStore, load_api_client
from recall.resources import Phase
from recall_dev.cluster import ControlPlane, tools_bin_dir
from recall_dev.crds import install_crds
from recall_dev.procs import die_with_parent
from tests.helpers import Procs, batch_manifest, list_jobs, read_events, wait_for
from tests.rbac import service_account_token, token_kubeconfig

RELEASE = "r"
CHART = Path(__file__).resolve().parents[2] / "charts" / "recall"
ITEMS = 160
WORKERS = 6
FLOOD_SECONDS = 25
FLOOD_CONNECTIONS = 400


@pytest.fixture(scope="module")
def busy_plane() -> Iterator[ControlPlane]:
    """A control plane whose API server has 16 seats in all (APF on, as in any cluster)."""
    cp = ControlPlane(
        apiserver_args=["--max-requests-inflight=10", "--max-mutating-requests-inflight=6"]
    )
    cp.start(timeout=180)
    try:
        install_crds(str(cp.kubeconfig))
        yield cp
    finally:
        cp.stop()


def chart_apf(namespace: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [
            str(tools_bin_dir(build=False) / "helm"),
            "template",
            RELEASE,
            str(CHART),
            "--namespace",
            namespace,
            "--show-only",
            "templates/apf.yaml",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def install_apf(api: client.ApiClient, docs: list[dict[str, Any]]) -> None:
    flow = client.FlowcontrolApiserverV1Api(api)
    for doc in docs:
        if doc["kind"] == "PriorityLevelConfiguration":
            flow.create_priority_level_configuration(doc)
    for doc in docs:
        if doc["kind"] == "FlowSchema":
            flow.create_flow_schema(doc)


def bind(api: client.ApiClient, namespace: str, sa: str, role: str) -> None:
    client.RbacAuthorizationV1Api(api).create_cluster_role_binding(
        {
            "metadata": {"name": f"{namespace}-{sa}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}],
        }
    )


FLOOD = textwrap.dedent(
    """
    import json, sys, threading, time
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    server, ca, token, ns, seconds, connections, out = sys.argv[1:8]
    seconds, connections = float(seconds), int(connections)
    counts = {"ok": 0, "throttled": 0, "other": 0}
    lock = threading.Lock()
    def run(i):
        cfg = client.Configuration()
        cfg.host, cfg.ssl_ca_cert = server, ca
        cfg.api_key = {"authorization": token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
        core = client.CoreV1Api(client.ApiClient(cfg))
        name = f"noise-{i % 20}"
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                core.patch_namespaced_config_map(name, ns, {"data": {"n": str(time.time())}},
                                                 _request_timeout=30)
                kind = "ok"
            except ApiException as e:
                kind = "throttled" if e.status == 429 else "other"
            except Exception:
                kind = "other"
            with lock:
                counts[kind] += 1
    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(connections)]
    for t in threads: t.start()
    for t in threads: t.join(seconds + 60)
    open(out, "w").write(json.dumps(counts))
    """
)


def completed_at(kube: KubeStore, namespace: str) -> list[float]:
    return sorted(
        j.status.completed_at.timestamp()
        for j in list_jobs(kube, namespace)
        if j.status.phase == Phase.SUCCEEDED and j.status.completed_at
    )


def rate(times: list[float], start: float, end: float) -> float:
    return sum(1 for t in times if start <= t < end) / (end - start)


def test_flood__no_live_lease_expires_nothing_is_lost_and_throughput_comes_back(
    busy_plane: ControlPlane,
    store_env: dict[str, str],
    object_store: Any,
    results: Bucket,
    tmp_path: Path,
) -> None:
    cp = busy_plane
    admin = load_api_client(cp.kubeconfig)
    kube = KubeStore(admin)
    namespace = "recall"
    core = client.CoreV1Api(admin)
    core.create_namespace({"metadata": {"name": namespace}})
    install_apf(admin, chart_apf(namespace))
    for sa in (f"{RELEASE}-recall-operator", f"{RELEASE}-recall-worker", "noisy"):
        service_account_token(admin, namespace, sa)
    bind(admin, namespace, f"{RELEASE}-recall-operator", "cluster-admin")
    bind(admin, namespace, f"{RELEASE}-recall-worker", "cluster-admin")
    bind(admin, namespace, "noisy", "edit")
    for i in range(20):
        core.create_namespaced_config_map(namespace, {"metadata": {"name": f"noise-{i}"}})

    def identity(sa: str) -> Path:
        token = service_account_token(admin, namespace, sa)
        user = f"system:serviceaccount:{namespace}:{sa}"
        return token_kubeconfig(cp, token, tmp_path / f"{sa}.kubeconfig", namespace, user)

    env = {**cp.env(), **store_env, "RECALL_STORE_URL": results.url}
    env |= {"RECALL_LOG_FORMAT": "json", "PYTHONUNBUFFERED": "1"}
    procs = Procs(env=env, logs=tmp_path / "logs", worker_env=object_store.env(object_store.worker))
    try:
        operator = {"KUBECONFIG": str(identity(f"{RELEASE}-recall-operator"))}
        procs.recall("operator", "operator", "--namespace", namespace, env=operator)
        worker = {"KUBECONFIG": str(identity(f"{RELEASE}-recall-worker"))}
        for i in range(WORKERS):
            procs.worker(f"w{i}", "--engine", "simulated", "--namespace", namespace, env=worker)
        # Jobs of 2.4 s of engine time, a checkpoint every second, 10 s leases.
        manifest = batch_manifest(
            "talks",
            [f"k{i:03d}" for i in range(ITEMS)],
            lease=10,
            simulate={"chunks": 8, "chunkDelaySeconds": 0.3},
        )
        manifest["spec"]["defaults"]["checkpointSeconds"] = 1
        kube.create_batch(namespace, manifest)

        wait_for(lambda: len(completed_at(kube, namespace)) >= 15, timeout=240, message=procs.dump)
        flood_start = time.time()
        counts_file = tmp_path / "flood.json"
        flood = subprocess.Popen(
            [
                "nice",
                "-n",
                "10",
                sys.executable,
                "-c",
                FLOOD,
                cp.server,
                str(cp.pki.ca_cert),
                service_account_token(admin, namespace, "noisy"),
                namespace,
                str(FLOOD_SECONDS),
                str(FLOOD_CONNECTIONS),
                str(counts_file),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
        try:
            assert flood.wait(timeout=FLOOD_SECONDS + 120) == 0
        finally:
            if flood.poll() is None:
                flood.kill()
                flood.wait()
        flood_end = time.time()
        counts = json.loads(counts_file.read_text())

        wait_for(
            lambda: len(completed_at(kube, namespace)) == ITEMS,
            timeout=600,
            message=procs.dump,
        )
        jobs = list_jobs(kube, namespace)
        # Nothing lost, nothing done twice, and no lease of a live worker expired.
        assert all(j.status.phase == Phase.SUCCEEDED for j in jobs)
        assert sum(j.status.expired_leases for j in jobs) == 0
        assert all(j.status.attempts == 1 for j in jobs)
        assert all(j.status.result and j.status.result.attempt == 1 for j in jobs)
        lost = [
            e
            for p in procs.started
            for e in read_events(p.log)
            if e.get("event") in ("lease_lost", "reclaimed")
        ]
        assert lost == []
        # The flood was turned away by APF while recall worked, and recall kept working.
        assert counts["throttled"] > 0, counts
        done = completed_at(kube, namespace)
        before = rate(done, done[0], flood_start)
        during = rate(done, flood_start, flood_end)
        after_end = min(done[-1], flood_end + 20)
        print(f"\nflood {counts}; jobs/s before {before:.2f}, during {during:.2f}")
        assert during > 0, "no job completed during the flood"
        if after_end > flood_end + 5:  # enough work was left to see it come back
            after = rate(done, flood_end, after_end)
            print(f"jobs/s after {after:.2f}")
            assert after >= 0.5 * before, (before, during, after)
    finally:
        procs.kill_all()
