"""Ambiguous outcomes against the real API server: a write the server applied whose answer the
worker never got (injected right after the PATCH returned). The worker settles it by reading the
job back: an applied claim is held, an applied complete is a success and its transcript is kept,
an applied renew, fail or release is not retried into a refusal."""

from __future__ import annotations

import signal

import pytest

from recall.bucket import Bucket
from recall.kube.client import KubeClient as Kube
from recall.resources import Phase
from tests.helpers import Proc, Procs, create_job, get_job, wait_for_phase


def settled(events: list[dict[str, object]], action: str) -> bool:
    return any(
        e.get("event") == "write_settled_by_read" and e.get("action") == action for e in events
    )


def losing_answers(procs: Procs, namespace: str, action: str, *args: str) -> Proc:
    """A worker that never gets the answer of its `action` writes, though the server applies
    them."""
    return procs.simulated_worker(
        "w", namespace, *args, env={"RECALL_FAULT": f"lose-answer:{action}"}
    )


@pytest.mark.parametrize("action", ["claim", "renew", "complete"])
def test_lost_answer__settled_by_reading_back(
    kube: Kube, namespace: str, procs: Procs, results: Bucket, action: str
) -> None:
    # Two seconds of work with a checkpoint every second: one renewal at least.
    create_job(
        kube,
        namespace,
        "j",
        lease=6,
        checkpoint=1,
        simulate={"chunks": 4, "chunkDelaySeconds": 0.5},
    )
    w = losing_answers(procs, namespace, action, "--max-jobs", "1")
    wait_for_phase(kube, namespace, "j", Phase.SUCCEEDED, timeout=30, procs=procs)
    assert w.wait(timeout=20) == 0
    job = get_job(kube, namespace, "j")
    assert job.status.result is not None
    assert (job.status.attempts, job.status.result.attempt, job.status.result.worker) == (1, 1, "w")
    events = w.events()
    names = [e.get("event") for e in events]
    if action == "claim":
        # The claim's answer was lost: the worker found its own lease on re-read.
        assert "claimed" in names
    else:
        assert settled(events, action), names
    assert "lease_lost" not in names
    # Nothing the accepted result references was deleted.
    assert results.get(job.status.result.transcript) is not None


def test_lost_answer_of_fail__recorded_once(kube: Kube, namespace: str, procs: Procs) -> None:
    create_job(kube, namespace, "bad", lease=6, simulate={"chunks": 2, "failure": "permanent"})
    w = losing_answers(procs, namespace, "fail", "--max-jobs", "1")
    wait_for_phase(kube, namespace, "bad", Phase.FAILED, timeout=30, procs=procs)
    assert w.wait(timeout=20) == 0
    job = get_job(kube, namespace, "bad")
    assert (job.status.attempts, job.status.failures) == (1, 1)
    assert settled(w.events(), "fail")
    assert "fail_not_recorded" not in w.event_names()


def test_lost_answer_of_release__job_queued_worker_exits(
    kube: Kube, namespace: str, procs: Procs
) -> None:
    create_job(kube, namespace, "slow", lease=10, simulate={"chunks": 30, "chunkDelaySeconds": 0.5})
    w = losing_answers(procs, namespace, "release", "--grace", "0")
    wait_for_phase(kube, namespace, "slow", Phase.LEASED, timeout=20, procs=procs)
    w.signal(signal.SIGTERM)
    assert w.wait(timeout=20) == 0
    job = get_job(kube, namespace, "slow")
    assert (job.status.phase, job.status.releases, job.status.lease) == (Phase.QUEUED, 1, None)
    assert settled(w.events(), "release")
    assert "release_failed" not in w.event_names()
