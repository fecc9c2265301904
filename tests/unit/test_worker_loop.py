"""The real worker loop on the memory store with the simulated engine: jobs done, a lease lost
mid-job, a lost answer of complete, a refusing transcript store, a flaky API."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from recall import lease
from recall.engines.simulated import SimulatedEngine
from recall.fencing import fenced_write
from recall.models import Phase
from recall.settings import WorkerSettings
from recall.store import Invalid, Unavailable
from recall.store.memory import Fault, MemoryStore
from recall.transcripts import TranscriptStore
from recall.worker import Worker
from tests.unit.fakes import NS, job_manifest


def make_worker(store: MemoryStore, tmp_path: Path, **settings: object) -> Worker:
    ws = WorkerSettings(
        id="w1",
        engine="simulated",
        idle_exit_seconds=1.0,
        self_serve_seconds=0.2,
        retry_base_seconds=0.1,
        simulated_record=tmp_path / "chunks.jsonl",
        **settings,  # type: ignore[arg-type]
    )
    return Worker(store, ws, SimulatedEngine(chunks=2, chunk_delay_seconds=0), namespace=NS)


def run(worker: Worker, timeout: float = 20.0) -> None:
    t = threading.Thread(target=worker.run)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "the worker did not finish"


def test_worker__does_every_job_once_and_references_its_transcript(tmp_path: Path) -> None:
    store = MemoryStore(watch_seconds=1.0)
    for i in range(3):
        store.create_job(NS, job_manifest(f"j{i}"))
    run(make_worker(store, tmp_path))
    for i in range(3):
        job = store.get_job(NS, f"j{i}")
        assert job is not None and job.status.phase == Phase.SUCCEEDED
        assert job.status.result is not None and job.status.result.attempt == 1
        text = TranscriptStore(store).load_transcript(NS, job.status.result.config_map)
        assert text is not None and f"j{i} chunk 1" in text.text
    store.close()


def test_worker__stops_when_its_lease_is_cancelled_mid_job(tmp_path: Path) -> None:
    store = MemoryStore(watch_seconds=1.0)
    store.create_job(
        NS,
        job_manifest(
            "slow",
            engine={"name": "simulated", "simulate": {"chunks": 50, "chunkDelaySeconds": 0.1}},
        ),
    )
    worker = make_worker(store, tmp_path)
    t = threading.Thread(target=worker.run)
    t.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        job = store.get_job(NS, "slow")
        if job and job.status.progress and job.status.progress.chunks_done >= 2:
            break
        time.sleep(0.05)
    fenced_write(
        store,
        NS,
        "slow",
        lambda j: lease.cancel(j.status, j.status.started_at, reason="Test", message="m"),  # type: ignore[arg-type]
        action="cancel",
    )
    t.join(20)
    assert not t.is_alive()
    job = store.get_job(NS, "slow")
    assert job is not None and job.status.phase == Phase.CANCELLED and job.status.result is None
    assert store.list_config_maps(NS, "recall.dev/store=transcript") == []
    store.close()


def test_worker__lost_answer_of_complete_keeps_the_transcript(tmp_path: Path) -> None:
    store = MemoryStore(watch_seconds=1.0)
    store.create_job(NS, job_manifest("a"))
    store.inject(
        Fault(
            "patch_job_status",
            Unavailable("read timed out", maybe_applied=True),
            applied=True,
            when=lambda args: args["patch"].get("phase") == "Succeeded",
        )
    )
    run(make_worker(store, tmp_path))
    job = store.get_job(NS, "a")
    assert job is not None and job.status.phase == Phase.SUCCEEDED and job.status.result
    assert store.get_config_map(NS, job.status.result.config_map) is not None
    store.close()


def test_worker__a_refusing_transcript_store_fails_the_job_for_good(tmp_path: Path) -> None:
    store = MemoryStore(watch_seconds=1.0)
    store.create_job(NS, job_manifest("a"))
    store.inject(
        Fault("create_config_map", Invalid("Too long: must have at most 1048576 bytes"), times=100)
    )
    run(make_worker(store, tmp_path))
    job = store.get_job(NS, "a")
    assert job is not None and job.status.phase == Phase.FAILED
    assert job.status.last_error is not None
    assert (job.status.last_error.reason, job.status.last_error.permanent) == (
        "TranscriptRefused",
        True,
    )
    assert job.status.attempts == 1
    store.close()


def test_worker__survives_a_flaky_api(tmp_path: Path) -> None:
    store = MemoryStore(watch_seconds=1.0)
    for i in range(2):
        store.create_job(NS, job_manifest(f"j{i}"))
    store.inject(Fault("patch_job_status", Unavailable("connection reset"), times=3))
    store.inject(Fault("list_jobs", Unavailable("503 starting"), times=2))
    store.inject(Fault("create_config_map", Unavailable("503"), times=2))
    run(make_worker(store, tmp_path), timeout=30)
    for i in range(2):
        job = store.get_job(NS, f"j{i}")
        assert job is not None and job.status.phase == Phase.SUCCEEDED, store.dump()
    store.close()
