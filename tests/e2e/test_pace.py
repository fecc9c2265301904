"""The engine sets the pace, on the real API server and the real S3 server: a fast job's API
writes follow its wall time, not its chunks; every checkpoint a renewal writes names only
chunks whose objects are durable; a worker killed at any moment leaves at most
`checkpointSeconds` of engine work to redo."""

from __future__ import annotations

import datetime as dt
import math
import signal
import threading
from pathlib import Path
from typing import Any

from recall.bucket import Bucket
from recall.kube.base import Conflict
from recall.kube.client import KubeClient as Kube
from recall.resources import Phase, TranscriptionJob
from recall.transcripts.layout import attempt_dir, chunk_key
from tests.helpers import Procs, create_job, get_job, job_phase, read_jsonl, wait_for


class Versions:
    """Every version of one job the API server holds from `since` on, from a watch; for each
    one with progress, whether the last chunk of each part it names is in the store then."""

    def __init__(self, kube: Kube, results: Bucket, job: TranscriptionJob) -> None:
        self.kube, self.results, self.job = kube, results, job
        self.seen: list[TranscriptionJob] = []
        self.missing: list[str] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        ns, name = self.job.namespace, self.job.name
        rv = self.job.metadata.resource_version or "0"
        while not self.done.is_set():
            try:
                for event in self.kube.watch_jobs(ns, rv):
                    obj = event.object
                    rv = obj["metadata"]["resourceVersion"]
                    if event.type != "MODIFIED" or obj["metadata"]["name"] != name:
                        continue
                    self._check(TranscriptionJob.from_api(obj))
                    if self.seen[-1].status.phase in (Phase.SUCCEEDED, Phase.FAILED):
                        self.done.set()
                        return
            except Conflict:  # too old: nothing to do but say so
                self.missing.append("the watch lost versions")
                return

    def _check(self, job: TranscriptionJob) -> None:
        self.seen.append(job)
        progress = job.status.progress
        if job.status.phase != Phase.LEASED or progress is None:
            return
        uid = job.metadata.uid or ""
        for part in progress.parts:
            directory = attempt_dir(job.namespace, job.name, uid, part.attempt, part.token)
            key = chunk_key(directory, part.end - 1)
            if not self.results.exists(key):
                self.missing.append(f"{progress.chunks_done} chunks named, {key} not stored")


def stamp(event: dict[str, Any]) -> dt.datetime:
    return dt.datetime.fromisoformat(event["timestamp"])


def completed(proc_events: list[dict[str, Any]]) -> dict[str, Any]:
    (done,) = [e for e in proc_events if e.get("event") == "completed"]
    return done


def test_fast_job__writes_follow_its_wall_time_and_name_only_durable_chunks(
    kube: Kube, namespace: str, procs: Procs, results: Bucket
) -> None:
    chunks, checkpoint = 600, 2.0
    procs.recall("operator", "operator", "--namespace", namespace)
    job = create_job(
        kube,
        namespace,
        "fast",
        lease=60,  # a heartbeat every 20 s: every renewal here is a checkpoint's
        checkpoint=checkpoint,
        simulate={"chunks": chunks, "chunkDelaySeconds": 0.01},  # 3,000× real time
    )
    versions = Versions(kube, results, job)
    worker = procs.worker("w", "--engine", "simulated", "--namespace", namespace)
    wait_for(
        lambda: job_phase(kube, namespace, "fast") == Phase.SUCCEEDED,
        timeout=120,
        message=procs.dump,
    )
    assert versions.done.wait(30), "the watch did not see the job succeed"
    assert versions.missing == []

    # The worker logs its completion after the API server has answered the write.
    wait_for(
        lambda: any(e.get("event") == "completed" for e in worker.events()),
        timeout=30,
        message=procs.dump,
    )
    events = worker.events()
    done = completed(events)
    claimed = next(e for e in events if e.get("event") == "claimed")
    wall = (stamp(done) - stamp(claimed)).total_seconds()
    # The API server's own record: each write of the holder presents a fence of its own.
    result = versions.seen[-1].status.result
    assert result is not None and result.token
    token = result.token
    fences = {v.status.fence for v in versions.seen if (v.status.fence or "").startswith(token)}
    renewals = len(fences) - 2  # the claim's and the complete's
    bound = math.ceil(wall / checkpoint) + 1  # one per interval (the last one partial)
    print(f"\n{chunks} chunks in {wall:.1f} s: {renewals} renewals, {len(versions.seen)} versions")
    assert 1 <= renewals <= bound, (renewals, wall)
    assert done["lease_writes"] == len(fences)  # the worker's own count agrees
    assert len(fences) < chunks / 20  # and it is not one per chunk
    final = get_job(kube, namespace, "fast").status.progress
    assert final is not None and final.chunks_done == chunks


def test_worker_killed_at_any_moment__redoes_at_most_a_checkpoint_interval(
    kube: Kube, namespace: str, procs: Procs, tmp_path: Path
) -> None:
    delay, checkpoint, lease = 0.05, 2.0, 6
    record = tmp_path / "engine.jsonl"
    env = {"RECALL_WORKER_SIMULATED_RECORD": str(record)}
    procs.recall("operator", "operator", "--namespace", namespace)
    create_job(
        kube,
        namespace,
        "long",
        lease=lease,
        checkpoint=checkpoint,
        simulate={"chunks": 300, "chunkDelaySeconds": delay},  # 600× real time, 15 s a job
    )
    first = procs.worker("first", "--engine", "simulated", "--namespace", namespace, env=env)
    # Killed 5.3 s into its engine work: between two checkpoints, not at one.
    wait_for(
        lambda: sum(1 for r in read_jsonl(record) if r["attempt"] == 1) >= 106,
        timeout=120,
        interval=0.01,
        message=procs.dump,
    )
    first.signal(signal.SIGKILL)
    first.wait(timeout=30)
    procs.worker("second", "--engine", "simulated", "--namespace", namespace, env=env)
    wait_for(
        lambda: job_phase(kube, namespace, "long") == Phase.SUCCEEDED,
        timeout=180,
        message=procs.dump,
    )
    runs = read_jsonl(record)
    made_first = {r["chunk"] for r in runs if r["attempt"] == 1}
    made_second = {r["chunk"] for r in runs if r["attempt"] == 2}
    assert made_first | made_second == set(range(300))
    redone = made_first & made_second
    # At most one interval of engine work, plus the chunks still on their way into the store
    # (the store stage's queue, and the one in the engine) when the worker died.
    on_their_way = 4 + 2
    print(f"\nkilled after {len(made_first)} chunks; {len(redone)} done again")
    assert len(redone) * delay <= checkpoint + on_their_way * delay, sorted(redone)
    job = get_job(kube, namespace, "long")
    assert (job.status.attempts, job.status.expired_leases) == (2, 1)
