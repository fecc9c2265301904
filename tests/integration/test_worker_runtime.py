"""The worker's heartbeats, its renew deadline, its graceful stop, and its tolerance of
unrelated writes — one worker process against the real API server."""

from __future__ import annotations

import signal
import time

import pytest
from kubernetes.client.exceptions import ApiException

from recall.bucket import Bucket
from recall.kube.client import MERGE_PATCH
from recall.kube.client import KubeClient as Kube
from recall.resources import GROUP, JOB_PLURAL, VERSION, Phase
from recall_dev.cluster import ControlPlane
from tests.helpers import (
    ControllerThread,
    Proc,
    Procs,
    create_job,
    get_job,
    merge_patch,
    wait_for,
    wait_for_phase,
)


def leased(
    kube: Kube,
    namespace: str,
    procs: Procs,
    name: str,
    *args: str,
    lease: int,
    chunks: int,
    delay: float,
) -> Proc:
    """The worker w, started with `args`, once it holds the lease of job `name` (`chunks`
    simulated chunks of `delay` s each, a lease of `lease` s)."""
    simulate = {"chunks": chunks, "chunkDelaySeconds": delay}
    create_job(kube, namespace, name, lease=lease, simulate=simulate)
    w = procs.simulated_worker("w", namespace, *args)
    wait_for_phase(kube, namespace, name, Phase.LEASED, timeout=20, procs=procs)
    return w


@pytest.mark.slow
def test_engine_blocking_three_leases__completes_without_losing_the_lease(
    kube: Kube, namespace: str, procs: Procs, results: Bucket
) -> None:
    lease = 3
    create_job(
        kube,
        namespace,
        "long",
        lease=lease,
        simulate={"chunks": 1, "blockSeconds": 3 * lease, "chunkDelaySeconds": 0},
    )
    with ControllerThread(kube, namespace, results) as reaper:
        w = procs.simulated_worker("w", namespace, "--max-jobs", "1")
        wait_for_phase(
            kube, namespace, "long", Phase.SUCCEEDED, timeout=3 * lease + 15, procs=procs
        )
        assert reaper.reclaimed == []
    job = get_job(kube, namespace, "long")
    assert (job.status.attempts, job.status.expired_leases) == (1, 0)
    assert "lease_lost" not in w.event_names()
    assert w.wait(timeout=20) == 0


def test_unrelated_writes_during_a_lease__cause_no_lease_loss(
    kube: Kube, namespace: str, procs: Procs
) -> None:
    w = leased(kube, namespace, procs, "busy", "--max-jobs", "1", lease=4, chunks=6, delay=0.4)
    writes = refused = 0
    while get_job(kube, namespace, "busy").status.phase == Phase.LEASED and writes < 20:
        # Another client: a label change (applied, it moves the resourceVersion under the
        # worker), and a status write without the lease token (refused by the CRD).
        labels = {"metadata": {"labels": {"touched": str(writes)}}}
        merge_patch(kube, namespace, JOB_PLURAL, "busy", labels)
        try:
            kube.custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                JOB_PLURAL,
                "busy",
                {"status": {"progress": {"summary": "hijacked"}}},
                _content_type=MERGE_PATCH,
            )
        except ApiException as e:
            refused += e.status == 422
        writes += 1
        time.sleep(0.15)
    wait_for_phase(kube, namespace, "busy", Phase.SUCCEEDED, timeout=30, procs=procs)
    job = get_job(kube, namespace, "busy")
    assert writes >= 5 and refused >= 5
    assert job.status.attempts == 1
    assert "lease_lost" not in w.event_names()
    # Transitions are logged with fixed keys, the token shortened.
    claimed = next(e for e in w.events() if e.get("event") == "claimed")
    assert {"job", "worker", "attempt", "token"} <= claimed.keys()
    assert (claimed["job"], claimed["worker"], claimed["attempt"]) == ("busy", "w", 1)
    assert len(claimed["token"]) == 8
    assert job.status.lease is None
    assert job.metadata.labels["touched"] == str(writes - 1)
    assert job.status.progress is not None and job.status.progress.summary != "hijacked"
    assert any(c.type == "Complete" for c in job.status.conditions)


def test_sigterm__releases_the_lease_after_grace_and_exits_zero(
    kube: Kube, namespace: str, procs: Procs
) -> None:
    create_job(kube, namespace, "slow", lease=10, simulate={"chunks": 30, "chunkDelaySeconds": 1})
    w = procs.simulated_worker("w", namespace, "--grace", "1")

    def working() -> bool:
        progress = get_job(kube, namespace, "slow").status.progress
        return progress is not None and progress.chunks_done >= 1

    wait_for(working, timeout=20, message=procs.dump)
    sent = time.monotonic()
    w.signal(signal.SIGTERM)
    wait_for(
        lambda: get_job(kube, namespace, "slow").status.phase == Phase.QUEUED,
        timeout=10,
        interval=0.05,
        message=procs.dump,
    )
    requeued_after = time.monotonic() - sent
    assert w.wait(timeout=10) == 0
    job = get_job(kube, namespace, "slow")
    assert job.status.lease is None
    assert (job.status.attempts, job.status.releases) == (1, 1)
    assert "released" in w.event_names()
    print(f"\nSIGTERM → Queued in {requeued_after:.2f} s (grace 1 s)")
    assert requeued_after < 5


def test_sigterm__lets_the_current_job_finish_within_grace(
    kube: Kube, namespace: str, procs: Procs
) -> None:
    w = leased(kube, namespace, procs, "short", "--grace", "20", lease=10, chunks=3, delay=0.5)
    w.signal(signal.SIGTERM)
    assert w.wait(timeout=25) == 0
    job = get_job(kube, namespace, "short")
    assert job.status.phase == Phase.SUCCEEDED
    assert job.status.releases == 0


def test_renew_deadline__worker_stops_on_its_own_when_the_api_is_unreachable(
    control_plane: ControlPlane, kube: Kube, namespace: str, procs: Procs
) -> None:
    lease = 3
    w = leased(kube, namespace, procs, "cut", lease=lease, chunks=20, delay=0.5)
    apiserver = next(p for p in control_plane.procs if p.name == "kube-apiserver")
    frozen_at = time.monotonic()
    import os

    os.kill(apiserver.pid, signal.SIGSTOP)
    try:
        lost = wait_for(
            lambda: [e for e in w.events() if e.get("event") == "lease_lost"],
            timeout=lease + 2,
            interval=0.05,
            message=procs.dump,
        )
        stopped_after = time.monotonic() - frozen_at
    finally:
        os.kill(apiserver.pid, signal.SIGCONT)
    assert lost[0]["reason"] == "RenewDeadline"
    # It stopped before its lease could have expired on anyone's clock.
    assert stopped_after < lease
    wait_for(control_plane.ready, timeout=20, message="the API server to answer again")
