"""The API server is the whole cluster's: flooded by other clients while recall works, it turns
the flood away (API Priority and Fairness, with the chart's FlowSchemas and priority levels),
no live worker's lease expires, nothing is lost, and throughput falls and comes back.

A control plane of its own, with few seats (`--max-requests-inflight`, as a busy cluster has
few to spare), so that APF queues and rejects at a flood one test process can make. The
operator and the workers run as their ServiceAccounts (an admin is exempt from APF); the flood
is another ServiceAccount patching ConfigMaps with hundreds of requests always outstanding (one
asyncio loop: the flood's strength does not depend on the CPU time its process gets, so neither
a busy machine nor its lower priority weakens it).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from recall.bucket import Bucket
from recall.kube.client import KubeClient, load_api_client
from recall.resources import Phase
from recall_dev.cluster import ControlPlane
from recall_dev.identities import (
    bind_cluster_role,
    chart_apf,
    install_apf,
    service_account_token,
    token_kubeconfig,
)
from recall_dev.procs import die_with_parent
from tests.helpers import Procs, batch_manifest, list_jobs, read_events, started, wait_for

RELEASE = "r"
CHART = Path(__file__).resolve().parents[2] / "charts" / "recall"
ITEMS = 160
WORKERS = 6
FLOOD_SECONDS = 25
FLOOD_CONNECTIONS = 600


@pytest.fixture(scope="module")
def busy_plane() -> Iterator[ControlPlane]:
    """A control plane whose API server has 16 seats in all (APF on, as in any cluster)."""
    seats = ["--max-requests-inflight=10", "--max-mutating-requests-inflight=6"]
    with started(ControlPlane(apiserver_args=seats)) as cp:
        yield cp


FLOOD = textwrap.dedent(
    """
    import asyncio, json, ssl, sys, time
    import aiohttp
    server, ca, token, ns, seconds, connections, out = sys.argv[1:8]
    seconds, connections = float(seconds), int(connections)
    counts = {"ok": 0, "throttled": 0, "other": 0}
    headers = {"Authorization": f"Bearer {token}",
               "Content-Type": "application/merge-patch+json"}

    async def one(session, i, end):
        url = f"{server}/api/v1/namespaces/{ns}/configmaps/noise-{i % 20}"
        while time.monotonic() < end:
            body = json.dumps({"data": {"n": str(time.time())}})
            try:
                async with session.patch(url, data=body, headers=headers) as r:
                    await r.read()
                    kind = "ok" if r.status < 300 else "throttled" if r.status == 429 else "other"
            except Exception:
                kind = "other"
            counts[kind] += 1

    async def main():
        context = ssl.create_default_context(cafile=ca)
        connector = aiohttp.TCPConnector(ssl=context, limit=0)
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            end = time.monotonic() + seconds
            await asyncio.gather(*(one(session, i, end) for i in range(connections)))

    asyncio.run(main())
    open(out, "w").write(json.dumps(counts))
    """
)


def flowcontrol(text: str, name: str) -> Counter[str]:
    """A flow-control counter of the API server's /metrics, summed by priority level."""
    out: Counter[str] = Counter()
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, value = line.rsplit(" ", 1)
            level = re.search(r'priority_level="([^"]*)"', labels)
            if level:
                out[level.group(1)] += int(float(value))
    return out


def completed_at(kube: KubeClient, namespace: str) -> list[float]:
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
    kube = KubeClient(admin)
    namespace = "recall"
    core = client.CoreV1Api(admin)
    core.create_namespace({"metadata": {"name": namespace}})
    install_apf(admin, chart_apf(RELEASE, namespace))
    for sa in (f"{RELEASE}-recall-operator", f"{RELEASE}-recall-worker", "noisy"):
        service_account_token(admin, namespace, sa)
    bind_cluster_role(admin, namespace, f"{RELEASE}-recall-operator", "cluster-admin")
    bind_cluster_role(admin, namespace, f"{RELEASE}-recall-worker", "cluster-admin")
    bind_cluster_role(admin, namespace, "noisy", "edit")
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
        assert after_end > flood_end + 5, "too little work was left to see throughput come back"
        after = rate(done, flood_end, after_end)
        print(f"jobs/s after {after:.2f}")
        assert after >= 0.5 * before, (before, during, after)
        # recall's requests went through its own priority levels (it is not exempt), and the
        # level of the writes that keep leases turned none of them away.
        metrics = cp.get_raw("/metrics", timeout=30)
        prefix = f"{namespace}-{RELEASE}-recall-"
        dispatched = flowcontrol(metrics, "apiserver_flowcontrol_dispatched_requests_total")
        rejected = flowcontrol(metrics, "apiserver_flowcontrol_rejected_requests_total")
        print(f"dispatched {dict(dispatched)}; rejected {dict(rejected)}")
        assert dispatched[prefix + "leases"] > 0 and dispatched[prefix + "work"] > 0, dispatched
        assert rejected[prefix + "leases"] == 0, rejected
    finally:
        procs.kill_all()
