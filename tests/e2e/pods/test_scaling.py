"""Workers that scale with the work, on kind: the chart's built-in autoscaler with real pods, a
real ReplicaSet and kubelets (`make e2e-kind`).

Its own release (`scale`, namespace `recall-scale`: simulated engine, two operators, at most
four workers, a short cooldown, one worker per scale-down step). The tests run in order and
share what a recorder samples every half second: the Deployment's count, the running worker
pods, the leased jobs.

- `helm upgrade` turning autoscaling on keeps the fleet; with nothing to do it goes to zero;
- a Batch applied with zero workers starts them, they finish it, and the fleet goes back to
  zero after the cooldown (the time from `kubectl apply` to the first claim is measured);
- a second Batch arriving during the scale-down is picked up;
- a hard-killed leading operator, in the middle of a scale-down, neither loses nor doubles
  workers: the standby takes over and goes on from what the API server says;
- over at least 20 scale-downs, no job is released or reclaimed: no scale-down stops a busy
  worker (DESIGN §5, invariant 11). The idle worker-seconds are compared with a fixed fleet of
  the same maximum over the same time, for the same work.
"""

from __future__ import annotations

import itertools
import json
import statistics
import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from recall.kube.client import KubeClient as Kube
from recall.resources import Phase
from tests.e2e.pods.conftest import CHART, ROOT, PodCluster
from tests.e2e.pods.fleet import (
    MAX,
    NS,
    RELEASE,
    VALUES,
    Recorder,
    Scaling,
    interrupted,
    leased_jobs,
    sampled_release,
)
from tests.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def scaling(
    cluster: PodCluster, kube: Kube, api: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Scaling]:
    recorder = Recorder(api, kube)
    tmp = tmp_path_factory.mktemp("scaling")
    with sampled_release(cluster, RELEASE, NS, VALUES, tmp, recorder, "fleet-recorder") as values:
        yield Scaling(cluster, kube, api, recorder, values)


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
    assert any(m.startswith("1 → 0 workers") for m in downs), downs  # Events are unordered


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
    out = ROOT / "build" / "autoscaling"
    out.mkdir(parents=True, exist_ok=True)
    (out / "figures.json").write_text(json.dumps(report, indent=2) + "\n")
    assert interrupted(every) == [], "a scale-down stopped a busy worker"
    assert len(downs) >= 20
    assert idle < MAX * window - busy
