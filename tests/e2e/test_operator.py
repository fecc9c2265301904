"""The operator with workers, all as processes against the real API server: fan-out,
reclaim, crash points, restarts, retries, suspension, deletion and HA."""

from __future__ import annotations

import signal
import time
from collections.abc import Mapping
from typing import Any

import pytest

from recall.kube.client import MERGE_PATCH
from recall.kube.client import KubeClient as Kube
from recall.resources import (
    BATCH_PLURAL,
    GROUP,
    JOB_PLURAL,
    VERSION,
    BatchStatus,
    ItemPhase,
    Phase,
    TranscriptionJob,
)
from recall_dev.cluster import free_port
from tests.helpers import (
    Proc,
    Procs,
    create_batch,
    events,
    get_batch,
    get_job,
    item_phase,
    job_phase,
    list_jobs,
    metric,
    wait_for,
)

SIM = "--engine", "simulated"


def operator(
    procs: Procs,
    namespace: str,
    name: str = "operator",
    *args: str,
    env: dict[str, str] | None = None,
) -> Proc:
    return procs.recall(name, "operator", "--namespace", namespace, *args, env=env)


def worker(
    procs: Procs, namespace: str, name: str, *args: str, env: dict[str, str] | None = None
) -> Proc:
    return procs.worker(name, *SIM, "--namespace", namespace, *args, env=env)


def batch_complete(kube: Kube, ns: str, name: str) -> bool:
    status: BatchStatus = get_batch(kube, ns, name).status
    return status.complete


def leased_by(kube: Kube, ns: str, holder: str) -> Any:
    for job in list_jobs(kube, ns):
        lease = job.status.lease
        if (
            lease is not None
            and lease.holder == holder
            and job.status.progress
            and job.status.progress.chunks_done >= 1
        ):
            return job
    return None


def test_fan_out__one_job_per_item_with_owner_labels_and_defaults(
    kube: Kube, namespace: str, procs: Procs
) -> None:
    operator(procs, namespace)
    create_batch(
        kube, namespace, "fan", ["a", "b", "c"], lease=7, max_attempts=2, simulate={"chunks": 1}
    )
    wait_for(lambda: len(list_jobs(kube, namespace)) == 3, timeout=20, message=procs.dump)
    batch = get_batch(kube, namespace, "fan")
    for job in list_jobs(kube, namespace):
        assert job.name == f"fan-{job.spec.item}"
        assert job.metadata.labels["recall.dev/batch"] == "fan"
        assert job.metadata.labels["recall.dev/item"] == job.spec.item
        assert (job.spec.lease_duration_seconds, job.spec.max_attempts) == (7, 2)
        assert job.spec.batch_ref == "fan"
        raw = kube.custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, JOB_PLURAL, job.name
        )
        owner = raw["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["uid"]) == ("Batch", batch.metadata.uid)
    wait_for(lambda: get_batch(kube, namespace, "fan").status.counts, timeout=10)
    assert get_batch(kube, namespace, "fan").status.counts.queued == 3


@pytest.mark.slow
def test_worker_killed_mid_job__reclaimed_in_time_and_finished_by_another(
    kube: Kube, namespace: str, procs: Procs
) -> None:
    lease = 3
    operator(procs, namespace)
    create_batch(
        kube,
        namespace,
        "b",
        ["a", "b", "c"],
        lease=lease,
        simulate={"chunks": 6, "chunkDelaySeconds": 0.4},
    )
    victim = worker(procs, namespace, "victim")
    job = wait_for(lambda: leased_by(kube, namespace, "victim"), timeout=30, message=procs.dump)
    victim.signal(signal.SIGKILL)
    killed = time.monotonic()
    wait_for(
        lambda: get_job(kube, namespace, job.name).status.expired_leases == 1,
        timeout=lease + 5,
        interval=0.05,
        message=procs.dump,
    )
    reclaim_after = time.monotonic() - killed
    assert reclaim_after <= lease + 2, f"reclaimed {reclaim_after:.2f} s after the kill"
    assert get_job(kube, namespace, job.name).status.phase == Phase.QUEUED
    wait_for(
        lambda: item_phase(kube, namespace, "b", job.spec.item) == ItemPhase.QUEUED,
        timeout=5,
        interval=0.05,
        message="the item to return to queued",
    )

    helper = worker(procs, namespace, "helper", "--idle-exit", "3")
    wait_for(lambda: batch_complete(kube, namespace, "b"), timeout=60, message=procs.dump)
    status = get_batch(kube, namespace, "b").status
    assert status.counts is not None
    assert (status.counts.completed, status.counts.failed, status.counts.total) == (3, 0, 3)
    assert status.expired_leases == 1
    entry = [a for a in status.attention if a.key == job.spec.item]
    assert entry == [] or entry[0].phase == ItemPhase.COMPLETED
    reclaimed = get_job(kube, namespace, job.name)
    assert reclaimed.status.result is not None and reclaimed.status.result.worker == "helper"
    assert events(kube, namespace, "Reclaimed")
    assert helper.wait(timeout=30) == 0
    print(f"\nreclaimed {reclaim_after:.2f} s after SIGKILL (lease {lease} s)")


@pytest.mark.parametrize(
    "fault", ["operator-after-reclaim-write", "operator-before-projection:True"]
)
def test_operator_crash_between_two_writes__healed_after_restart(
    kube: Kube, namespace: str, procs: Procs, fault: str
) -> None:
    lease = 3
    first = operator(procs, namespace, "operator-1", env={"RECALL_FAULT": fault})
    create_batch(
        kube,
        namespace,
        "crash",
        ["a"],
        lease=lease,
        simulate={"chunks": 4, "chunkDelaySeconds": 0.3},
    )
    w = worker(procs, namespace, "w1")
    if fault.startswith("operator-after-reclaim-write"):
        wait_for(lambda: leased_by(kube, namespace, "w1"), timeout=30, message=procs.dump)
        wait_for(
            lambda: item_phase(kube, namespace, "crash", "a") == ItemPhase.TRANSCRIBING,
            timeout=10,
            message=procs.dump,
        )
        w.signal(signal.SIGKILL)
        # The operator reclaims the job, then dies before writing the item.
        assert first.wait(timeout=lease + 10) == -signal.SIGKILL
        assert get_job(kube, namespace, "crash-a").status.phase == Phase.QUEUED
        assert item_phase(kube, namespace, "crash", "a") == ItemPhase.TRANSCRIBING
        expected = ItemPhase.QUEUED
    else:
        # The job completes; the operator dies before projecting it.
        assert first.wait(timeout=30) == -signal.SIGKILL
        assert get_job(kube, namespace, "crash-a").status.phase == Phase.SUCCEEDED
        assert item_phase(kube, namespace, "crash", "a") != ItemPhase.COMPLETED
        expected = ItemPhase.COMPLETED

    operator(procs, namespace, "operator-2")
    wait_for(
        lambda: item_phase(kube, namespace, "crash", "a") == expected,
        timeout=15,
        message=procs.dump,
    )
    batch = get_batch(kube, namespace, "crash")
    assert (batch.status.heals or 0) >= 1
    wait_for(lambda: events(kube, namespace, "Healed"), timeout=10, message="a Healed event")
    if expected is ItemPhase.QUEUED:
        worker(procs, namespace, "w2", "--idle-exit", "3")
        wait_for(lambda: batch_complete(kube, namespace, "crash"), timeout=30, message=procs.dump)
    for job in list_jobs(kube, namespace):
        assert (
            item_phase(kube, namespace, "crash", job.spec.item or "")
            == {Phase.SUCCEEDED: ItemPhase.COMPLETED, Phase.QUEUED: ItemPhase.QUEUED}[
                job.status.effective_phase
            ]
        )


@pytest.mark.slow
def test_operator_restart__never_reclaims_a_lease_being_renewed(
    kube: Kube, namespace: str, procs: Procs
) -> None:
    lease = 3
    op = operator(procs, namespace, "operator-1")
    create_batch(
        kube,
        namespace,
        "r",
        ["a", "b", "c", "d"],
        lease=lease,
        simulate={"chunks": 16, "chunkDelaySeconds": 0.5},
    )
    workers = [worker(procs, namespace, f"w{i}", "--idle-exit", "3") for i in range(2)]
    wait_for(
        lambda: sum(j.status.phase == Phase.LEASED for j in list_jobs(kube, namespace)) == 2,
        timeout=30,
        message=procs.dump,
    )
    op.signal(signal.SIGKILL)
    op.wait(timeout=10)
    time.sleep(lease + 2)  # every lease's renewTime is now older than its duration
    operator(procs, namespace, "operator-2")
    wait_for(lambda: batch_complete(kube, namespace, "r"), timeout=120, message=procs.dump)
    for job in list_jobs(kube, namespace):
        assert job.status.expired_leases == 0, job.name
        assert job.status.attempts == 1, job.name
    for w in workers:
        assert "lease_lost" not in w.event_names()


def failed_item(
    kube: Kube,
    namespace: str,
    procs: Procs,
    key: str,
    failure: Mapping[str, object],
    *,
    max_attempts: int,
    timeout: float,
    idle_exit: int,
    env: dict[str, str] | None = None,
) -> TranscriptionJob:
    """The job of item `key` of Batch p (2 simulated chunks that fail as `failure` says), under
    an operator and a worker w that idles out after `idle_exit` s, once it failed."""
    operator(procs, namespace)
    simulate = {"chunks": 2, **failure}
    create_batch(kube, namespace, "p", [key], max_attempts=max_attempts, simulate=simulate)
    worker(procs, namespace, "w", "--idle-exit", str(idle_exit), env=env)
    wait_for(
        lambda: job_phase(kube, namespace, f"p-{key}") == Phase.FAILED,
        timeout=timeout,
        message=procs.dump,
    )
    return get_job(kube, namespace, f"p-{key}")


def test_poison_job__fails_after_max_attempts_with_its_reason(
    kube: Kube, namespace: str, procs: Procs
) -> None:
    failure = {"failure": "retriable", "failAtChunk": 1}
    env = {"RECALL_WORKER_RETRY_BASE_SECONDS": "0.2"}
    job = failed_item(
        kube, namespace, procs, "poison", failure, max_attempts=3, timeout=60, idle_exit=5, env=env
    )
    assert (job.status.attempts, job.status.failures, job.status.expired_leases) == (3, 3, 0)
    assert job.status.last_error is not None and job.status.last_error.reason == "SimulatedFailure"
    assert any(
        c.type == "Failed" and c.reason == "AttemptsExhausted" for c in job.status.conditions
    )
    wait_for(lambda: item_phase(kube, namespace, "p", "poison") == ItemPhase.FAILED, timeout=10)
    batch = get_batch(kube, namespace, "p")
    failed = [a for a in batch.status.attention if a.key == "poison"]
    assert failed and failed[0].reason == "SimulatedFailure" and failed[0].phase == ItemPhase.FAILED
    assert any(c.type == "Failed" and c.status == "True" for c in batch.status.conditions)
    assert batch_complete(kube, namespace, "p")
    assert batch.status.failures == 3
    wait_for(lambda: events(kube, namespace, "Failed"), timeout=10, message="a Failed event")


def test_permanent_error__fails_at_once_without_retries(
    kube: Kube, namespace: str, procs: Procs
) -> None:
    failure = {"failure": "permanent"}
    job = failed_item(
        kube, namespace, procs, "bad", failure, max_attempts=5, timeout=30, idle_exit=3
    )
    assert (job.status.attempts, job.status.failures) == (1, 1)
    assert job.status.last_error is not None and job.status.last_error.permanent


def test_suspend__stops_new_claims_until_resumed(kube: Kube, namespace: str, procs: Procs) -> None:
    operator(procs, namespace)
    create_batch(kube, namespace, "s", ["a", "b"], suspend=True, simulate={"chunks": 1})
    worker(procs, namespace, "w", "--idle-exit", "30")
    wait_for(lambda: len(list_jobs(kube, namespace)) == 2, timeout=20, message=procs.dump)
    time.sleep(3)
    jobs = list_jobs(kube, namespace)
    assert all(j.status.attempts == 0 and j.suspended for j in jobs)
    assert any(
        c.type == "Progressing" and c.reason == "Suspended"
        for c in get_batch(kube, namespace, "s").status.conditions
    )
    kube.custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        BATCH_PLURAL,
        "s",
        {"spec": {"suspend": False}},
        _content_type=MERGE_PATCH,
    )
    wait_for(lambda: batch_complete(kube, namespace, "s"), timeout=30, message=procs.dump)
    assert not any(j.suspended for j in list_jobs(kube, namespace))


def test_delete_batch__cancels_its_jobs_and_the_holder_stops(
    kube: Kube, namespace: str, procs: Procs
) -> None:
    operator(procs, namespace)
    create_batch(
        kube, namespace, "d", ["a", "b"], lease=4, simulate={"chunks": 50, "chunkDelaySeconds": 0.3}
    )
    w = worker(procs, namespace, "w")
    wait_for(lambda: leased_by(kube, namespace, "w"), timeout=30, message=procs.dump)
    kube.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, BATCH_PLURAL, "d")
    wait_for(lambda: kube.get_batch(namespace, "d") is None, timeout=20, message=procs.dump)
    wait_for(lambda: not list_jobs(kube, namespace), timeout=20, message="the jobs to be deleted")
    lost = wait_for(
        lambda: [e for e in w.events() if e.get("event") == "lease_lost"],
        timeout=10,
        message=procs.dump,
    )
    assert lost[0]["reason"] in ("Terminal", "Gone")
    assert "completed" not in w.event_names()


@pytest.mark.slow
def test_two_operators__one_acts_and_the_other_takes_over(
    kube: Kube, namespace: str, procs: Procs
) -> None:
    ports = {"a": free_port(), "b": free_port()}
    active = operator(
        procs,
        namespace,
        "operator-a",
        "--leader-election",
        "--metrics-port",
        str(ports["a"]),
    )
    time.sleep(2)
    standby = operator(
        procs,
        namespace,
        "operator-b",
        "--leader-election",
        "--metrics-port",
        str(ports["b"]),
    )
    lease = 3
    create_batch(
        kube,
        namespace,
        "ha",
        [f"i{i}" for i in range(6)],
        lease=lease,
        simulate={"chunks": 4, "chunkDelaySeconds": 0.4},
    )
    victim = worker(procs, namespace, "victim")
    job = wait_for(lambda: leased_by(kube, namespace, "victim"), timeout=30, message=procs.dump)
    victim.signal(signal.SIGKILL)
    wait_for(
        lambda: get_job(kube, namespace, job.name).status.expired_leases == 1,
        timeout=lease + 5,
        message=procs.dump,
    )
    time.sleep(2)  # a second reclaim, if any, would happen now
    assert get_job(kube, namespace, job.name).status.expired_leases == 1
    assert metric(ports["a"], "recall_reclaims_total") == 1
    assert metric(ports["b"], "recall_reclaims_total") == 0
    assert metric(ports["b"], "recall_batch_status_writes_total") == 0

    active.signal(signal.SIGKILL)
    killed = time.monotonic()
    worker(procs, namespace, "w2", "--idle-exit", "5")
    wait_for(
        lambda: metric(ports["b"], "recall_batch_status_writes_total") > 0,
        timeout=40,
        interval=0.2,
        message=procs.dump,
    )
    takeover = time.monotonic() - killed
    wait_for(lambda: batch_complete(kube, namespace, "ha"), timeout=60, message=procs.dump)
    assert standby.alive()
    print(f"\nstandby operator took over {takeover:.1f} s after the active one was killed")


def test_projection__coalesces_a_burst_of_job_changes(
    kube: Kube, namespace: str, procs: Procs
) -> None:
    import datetime as dt
    import threading

    from recall.fencing import fenced_write
    from recall.protocol import lease as lease_core
    from recall.protocol.lease import Budget

    port = free_port()
    operator(procs, namespace, "operator", "--metrics-port", str(port))
    create_batch(
        kube,
        namespace,
        "burst",
        [f"i{i:03d}" for i in range(100)],
        lease=300,
        simulate={"chunks": 1},
    )
    wait_for(
        lambda: (
            len(list_jobs(kube, namespace)) == 100
            and get_batch(kube, namespace, "burst").status.counts.queued == 100
        ),
        timeout=60,
        message=procs.dump,
    )
    time.sleep(2)
    before = metric(port, "recall_batch_status_writes_total")
    jobs = list_jobs(kube, namespace)
    written: list[bool] = []

    def claim(part: list[Any]) -> None:
        for job in part:
            token = lease_core.new_token()

            def transition(j: TranscriptionJob, t: str = token) -> lease_core.Decision:
                return lease_core.claim(
                    j.status,
                    dt.datetime.now(dt.UTC),
                    "burst",
                    t,
                    lease_seconds=300,
                    budget=Budget(5, 10),
                )

            result = fenced_write(kube, namespace, job.name, transition, known=job, action="claim")
            written.append(result.applied)

    threads = [threading.Thread(target=claim, args=(jobs[i::10],)) for i in range(10)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    burst = time.monotonic() - started
    assert sum(written) == 100
    wait_for(
        lambda: get_batch(kube, namespace, "burst").status.counts.transcribing == 100,
        timeout=20,
        message=procs.dump,
    )
    time.sleep(1)
    writes = metric(port, "recall_batch_status_writes_total") - before
    print(f"\n100 job changes in {burst:.2f} s cost {writes:.0f} Batch status writes")
    # One write per tick at most (0.5 s): a burst of about a second costs a handful.
    assert writes <= 2 + 2 * (burst + 1) / 0.5


def test_reconcile__recreates_a_deleted_job_and_records_a_heal(
    kube: Kube, namespace: str, procs: Procs
) -> None:
    operator(procs, namespace, "operator", env={"RECALL_OPERATOR_RECONCILE_INTERVAL": "2"})
    create_batch(kube, namespace, "heal", ["a", "b"], simulate={"chunks": 1})
    wait_for(lambda: len(list_jobs(kube, namespace)) == 2, timeout=20, message=procs.dump)
    wait_for(lambda: get_batch(kube, namespace, "heal").status.counts, timeout=10)
    old_uid = get_job(kube, namespace, "heal-b").metadata.uid
    kube.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, JOB_PLURAL, "heal-b")
    wait_for(
        lambda: (j := kube.get_job(namespace, "heal-b")) is not None and j.metadata.uid != old_uid,
        timeout=20,
        message=procs.dump,
    )
    wait_for(lambda: events(kube, namespace, "Healed"), timeout=10, message="a Healed event")
    assert "heal-b" in events(kube, namespace, "Healed")[0].message
    assert (get_batch(kube, namespace, "heal").status.heals or 0) >= 1


def test_observability__metrics_and_liveness_endpoints(
    kube: Kube, namespace: str, procs: Procs
) -> None:
    import urllib.request

    metrics_port, liveness_port = free_port(), free_port()
    operator(
        procs,
        namespace,
        "operator",
        "--metrics-port",
        str(metrics_port),
        "--liveness-port",
        str(liveness_port),
    )
    wport = free_port()
    worker(procs, namespace, "w", "--metrics-port", str(wport))
    create_batch(kube, namespace, "obs", ["a"], simulate={"chunks": 2})
    wait_for(lambda: batch_complete(kube, namespace, "obs"), timeout=30, message=procs.dump)

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{liveness_port}/healthz", timeout=2
            ) as r:
                status: int = r.status  # urlopen's answer is typed Any
                return status == 200
        except OSError:
            return False

    wait_for(healthy, timeout=10, message="kopf's liveness endpoint")
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    for name in (
        "recall_reclaims_total",
        "recall_fenced_rejections_total",
        "recall_heals_total",
        "recall_jobs",
        "recall_reclaim_delay_seconds_bucket",
        "recall_batch_status_writes_total",
    ):
        assert name in text, name
    assert 'recall_jobs{phase="Succeeded"} 1.0' in text
    assert metric(wport, "recall_claims_total") == 1
    # A job shorter than the checkpoint interval: its claim and its complete, no renewal.
    assert metric(wport, "recall_worker_lease_writes_total") == 1  # the complete (the claim
    # is counted by recall_claims_total)
    assert metric(wport, "recall_heartbeat_latency_seconds_count") == 0
    assert metric(wport, "recall_worker_slots") == 1  # the free-slot alert counts these
    # The per-Batch gauges of the leading operator (RecallBatchNoProgress, the dashboard).
    done = f'recall_batch_items{{batch="{namespace}/obs",phase="completed"}} 1.0'

    def batch_gauge() -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
            return done in r.read().decode()

    wait_for(batch_gauge, timeout=15, message="the operator's recall_batch_items of obs")
    assert metric(metrics_port, "recall_batch_suspended") == 0


def test_fan_out__after_a_partial_one_creates_only_the_missing_jobs(
    kube: Kube, namespace: str, procs: Procs
) -> None:
    """An operator that died mid-way through a fan-out left one of three jobs behind."""
    from recall.operator.reconcile.fanout import job_for_item
    from recall.operator.reconcile.items import Item

    create_batch(kube, namespace, "half", ["a", "b", "c"], simulate={"chunks": 1})
    batch = kube.get_batch(namespace, "half")
    assert batch is not None
    first = batch.spec.items[0]
    kube.create_job(namespace, job_for_item(batch, Item(0, first.key, first.source.url)))
    first_uid = get_job(kube, namespace, "half-a").metadata.uid
    operator(procs, namespace)
    worker(procs, namespace, "w", "--idle-exit", "3")
    wait_for(lambda: batch_complete(kube, namespace, "half"), timeout=30, message=procs.dump)
    jobs = list_jobs(kube, namespace)
    assert sorted(j.name for j in jobs) == ["half-a", "half-b", "half-c"]
    assert get_job(kube, namespace, "half-a").metadata.uid == first_uid
    assert all(j.status.attempts == 1 for j in jobs)


def test_fan_out__a_name_taken_by_a_foreign_job_is_reported_not_touched(
    kube: Kube, namespace: str, procs: Procs
) -> None:
    from tests.helpers import create_job

    create_job(kube, namespace, "clash-a", priority=7)
    operator(procs, namespace)
    create_batch(kube, namespace, "clash", ["a", "b"], simulate={"chunks": 1})
    warning = wait_for(
        lambda: events(kube, namespace, "JobNameConflict"), timeout=20, message=procs.dump
    )
    assert "clash-a" in warning[0].message and "no Batch" in warning[0].message
    foreign = get_job(kube, namespace, "clash-a")
    assert foreign.spec.batch_ref is None and foreign.spec.priority == 7
    assert get_job(kube, namespace, "clash-b").spec.batch_ref == "clash"
