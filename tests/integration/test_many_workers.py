"""8 worker processes, 200 jobs: every job Succeeded exactly once, no duplicate accepted result."""

from __future__ import annotations

import collections
import time
from pathlib import Path

import pytest

from recall.bucket import Bucket
from recall.kube.client import KubeClient as Kube
from recall.resources import Phase
from tests.helpers import Procs, create_job, list_jobs, read_jsonl, store_keys, wait_for

WORKERS = 8
JOBS = 200
CHUNKS = 2


@pytest.mark.slow
def test_eight_workers_two_hundred_jobs__each_succeeds_once(
    kube: Kube, namespace: str, procs: Procs, results: Bucket, tmp_path: Path
) -> None:
    record = tmp_path / "engine-runs.jsonl"
    for i in range(JOBS):
        create_job(
            kube,
            namespace,
            f"job-{i:03d}",
            lease=20,
            priority=i % 3,
            simulate={"chunks": CHUNKS, "chunkDelaySeconds": 0.01},
        )
    env = {"RECALL_WORKER_SIMULATED_RECORD": str(record)}
    started = time.monotonic()
    workers = [
        procs.worker(
            f"w{i}", "--engine", "simulated", "--namespace", namespace, "--idle-exit", "3", env=env
        )
        for i in range(WORKERS)
    ]

    def all_succeeded() -> bool:
        jobs = list_jobs(kube, namespace)
        return sum(j.status.phase == Phase.SUCCEEDED for j in jobs) == JOBS

    wait_for(all_succeeded, timeout=240, interval=0.5, message=procs.dump)
    elapsed = time.monotonic() - started
    for w in workers:
        assert w.wait(timeout=30) == 0

    jobs = list_jobs(kube, namespace)
    runs = collections.Counter((r["job"], r["attempt"]) for r in read_jsonl(record))
    for job in jobs:
        result = job.status.result
        assert result is not None, job.name
        # The accepted result comes from one attempt, whose engine ran every chunk once.
        assert runs[(job.name, result.attempt)] == CHUNKS, job.name
        assert job.status.attempts == 1, job.name
    assert sum(runs.values()) == JOBS * CHUNKS, "the engine ran a chunk twice"

    transcripts = [k for k in store_keys(results, namespace) if k.endswith("/transcript.json")]
    assert len(transcripts) == JOBS  # one per job: no zombie's, no second attempt's
    assert set(transcripts) == {j.status.result.transcript for j in jobs}  # type: ignore[union-attr]

    stops = [e for w in workers for e in w.events() if e.get("event") == "worker_stopped"]
    claims = sum(e["claims"] for e in stops)
    conflicts = sum(e["claim_conflicts"] for e in stops)
    assert claims == JOBS
    print(
        f"\n{JOBS} jobs by {WORKERS} workers in {elapsed:.1f} s: "
        f"{JOBS / elapsed:.1f} claims/s, {conflicts / claims:.2f} 409s per claim"
    )
