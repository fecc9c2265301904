"""The real worker loop on the memory store with the simulated engine: jobs done, a lease lost
mid-job, a lost answer of complete, a refusing transcript store, a flaky API."""

from __future__ import annotations

import itertools
import json
import threading
import time
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from structlog.testing import capture_logs

from recall.base.settings import WorkerSettings
from recall.engines.simulated import SimulatedEngine
from recall.fencing import fenced_write
from recall.kube import Conflict, Forbidden, Invalid, TooLarge, Unavailable
from recall.kube.memory import Fault, MemoryStore
from recall.media import MediaOptions
from recall.protocol import lease
from recall.protocol.lease import Budget
from recall.protocol.observer import Observation
from recall.resources import Phase, TranscriptionJob
from recall.transcripts import (
    SHARD_BYTES,
    Manifest,
    Record,
    TranscriptStore,
    job_selector,
    unreferenced,
)
from recall.transcripts.layout import record_key
from recall.worker.loop import Worker
from tests.unit.fakes import NS, T0, job_manifest


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
    # It wrote its checkpoint, never a complete transcript; the cleanup names all of it.
    listed = store.list_config_maps(NS, job_selector("slow"))
    manifest = store.get_config_map(NS, "slow-a1")
    assert manifest is not None and Manifest.from_data(manifest.data).transcript is None
    assert unreferenced(job, listed) == sorted(cm.name for cm in listed) != []
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


# --- long media: resume, changed settings, refusals -----------------------------------------


def speech_file(path: Path, seconds: float, seed: int = 0) -> Path:
    """Speech-like noise bursts with pauses, as a 16 kHz WAV (the real audio path cuts it)."""
    rng = np.random.default_rng(seed)
    samples = np.zeros(int(seconds * 16_000), np.float32)
    t = 0
    while t < len(samples):
        word = int(rng.uniform(0.2, 0.8) * 16_000)
        samples[t : t + word] = rng.standard_normal(min(word, len(samples) - t)) * 0.2
        t += word + int(rng.uniform(0.05, 0.5) * 16_000)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16_000)
        w.writeframes((samples * 32767).astype("<i2").tobytes())
    return path


def audio_worker(
    store: MemoryStore, tmp_path: Path, chunk_seconds: float, *, shard_bytes: int = 1500, **kw: Any
) -> Worker:
    """A worker whose simulated engine takes the real audio path (fetch, decode, cut)."""
    ws = WorkerSettings(
        id="w1",
        engine="simulated",
        idle_exit_seconds=1.0,
        self_serve_seconds=0.2,  # no operator here: serve itself at once
        retry_base_seconds=0.05,
        retry_cap_seconds=0.1,
        **kw,
    )
    engine = SimulatedEngine(
        chunk_delay_seconds=0,
        record_path=tmp_path / "chunks.jsonl",
        media=MediaOptions(chunk_seconds=chunk_seconds),
        words_per_minute=150,
    )
    worker = Worker(store, ws, engine, namespace=NS)
    # a few chunks a shard
    worker.transcription.transcripts = TranscriptStore(store, shard_bytes=shard_bytes)
    return worker


def audio_job(name: str, url: str, **simulate: Any) -> dict[str, Any]:
    return job_manifest(
        name,
        source={"url": url},
        engine={"name": "simulated", "simulate": {"chunkDelaySeconds": 0, **simulate}},
    )


def engine_runs(tmp_path: Path, job: str) -> list[tuple[int, int]]:
    lines = (tmp_path / "chunks.jsonl").read_text().splitlines()
    return [(r["attempt"], r["chunk"]) for r in map(json.loads, lines) if r["job"] == job]


def cuts(store: MemoryStore, name: str) -> list[tuple[int, int]]:
    """The sample range of every chunk of the accepted transcript, in order."""
    manifest = Manifest.from_data(store.get_config_map(NS, name).data)  # type: ignore[union-attr]
    out = []
    for ref in manifest.shards:
        data = store.get_config_map(NS, ref.name).data  # type: ignore[union-attr]
        assert ref.end is not None
        records = [Record.decode(data[record_key(i)]) for i in range(ref.first, ref.end)]
        out += [(r.first, r.end) for r in records]
    return out


def end_backoff(store: MemoryStore, name: str) -> None:
    """What the operator does once the retry delay has passed on its clock."""
    fenced_write(store, NS, name, lambda j: lease.end_backoff(j.status), action="end_backoff")


def succeeded(store: MemoryStore, name: str) -> TranscriptionJob:
    job = store.get_job(NS, name)
    assert job is not None and job.status.phase == Phase.SUCCEEDED, store.dump()
    assert job.status.result is not None
    return job


def test_worker__a_resumed_attempt_continues_exactly_after_the_checkpoint(tmp_path: Path) -> None:
    url = speech_file(tmp_path / "talk.wav", 98.0).as_uri()
    store = MemoryStore(watch_seconds=1.0)
    store.create_job(
        NS, audio_job("resumed", url, failure="retriable", failAtChunk=4, failAttempts=1)
    )
    run(audio_worker(store, tmp_path, 10.0, max_jobs=1), timeout=30)  # attempt 1 fails
    end_backoff(store, "resumed")
    store.create_job(NS, audio_job("whole", url))
    with capture_logs() as logs:
        run(audio_worker(store, tmp_path, 10.0), timeout=60)
    assert [e["by"] for e in logs if e["event"] == "media_resumed"] == ["seek"]

    whole, resumed = succeeded(store, "whole"), succeeded(store, "resumed")
    assert engine_runs(tmp_path, "resumed") == [(1, 0), (1, 1), (1, 2), (1, 3)] + [
        (2, i) for i in range(4, len(cuts(store, "whole-a1")))
    ]
    assert resumed.status.result.attempt == 2  # type: ignore[union-attr]
    # The same cuts as the uninterrupted run: no gap, no overlap, nothing cut differently.
    assert cuts(store, "resumed-a2") == cuts(store, "whole-a1")
    assert cuts(store, "whole-a1")[0][0] == 0
    whole_cuts = cuts(store, "whole-a1")
    assert all(a[1] == b[0] for a, b in itertools.pairwise(whole_cuts))
    ts = TranscriptStore(store)
    a, b = ts.load_transcript(NS, "whole-a1"), ts.load_transcript(NS, "resumed-a2")
    assert a is not None and b is not None and a.segments == b.segments
    assert whole.status.progress is not None and resumed.status.progress is not None
    n = len(cuts(store, "whole-a1"))
    assert (resumed.status.progress.chunks_done, resumed.status.progress.chunks_total) == (n, n)
    assert n > 10  # snapped cuts: more than 95 s / 10 s
    # Stored once: the second attempt references the first one's shards; its manifest is gone.
    names = {cm.name for cm in store.list_config_maps(NS, job_selector("resumed"))}
    assert "resumed-a1" not in names and "resumed-a1-0" in names
    store.close()


@pytest.mark.parametrize("change", ["chunk_seconds", "source"])
def test_worker__a_resume_with_other_settings_or_source_starts_over(
    tmp_path: Path, change: str
) -> None:
    path = speech_file(tmp_path / "talk.wav", 60.0)
    store = MemoryStore(watch_seconds=1.0)
    store.create_job(
        NS, audio_job("j", path.as_uri(), failure="retriable", failAtChunk=3, failAttempts=1)
    )
    run(audio_worker(store, tmp_path, 10.0, max_jobs=1), timeout=30)
    job = store.get_job(NS, "j")
    assert job is not None and job.status.phase == Phase.QUEUED
    assert job.status.progress is not None and job.status.progress.chunks_done == 3

    end_backoff(store, "j")
    if change == "source":
        speech_file(path, 60.0, seed=1)  # rewritten: another mtime and other samples
    seconds = 15.0 if change == "chunk_seconds" else 10.0
    with capture_logs() as logs:
        run(audio_worker(store, tmp_path, seconds), timeout=30)
    job = succeeded(store, "j")
    discarded = [e for e in logs if e["event"] == "checkpoint_discarded"]
    expected = "chunk_seconds 10 → 15" if change == "chunk_seconds" else "the source changed"
    assert [e["reason"] for e in discarded] == [expected]
    assert next(c for a, c in engine_runs(tmp_path, "j") if a == 2) == 0  # from the start
    # Nothing of the first attempt is mixed in: every cut is the new cutting's, from sample 0.
    store.create_job(NS, audio_job("fresh", path.as_uri()))
    run(audio_worker(store, tmp_path, seconds), timeout=30)
    assert cuts(store, "j-a2") == cuts(store, "fresh-a1")
    manifest = Manifest.from_data(store.get_config_map(NS, "j-a2").data)  # type: ignore[union-attr]
    assert all(s.name.startswith("j-a2-") for s in manifest.shards)
    store.close()


QUOTA = (
    'configmaps "j-a1-2" is forbidden: exceeded quota: transcripts, requested: '
    "count/configmaps=1, used: count/configmaps=3, limited: count/configmaps=3"
)


@pytest.mark.parametrize(
    ("fault", "phrase"),
    [
        (Fault("create_config_map", Forbidden(QUOTA, status=403), name="j-a1-2", times=99), QUOTA),
        (
            Fault("patch_config_map", TooLarge("etcdserver: request is too large"), times=99),
            "request is too large",
        ),
    ],
    ids=["quota", "too-large"],
)
def test_worker__a_refusing_store_fails_the_job_at_once_without_paying_again(
    tmp_path: Path, fault: Fault, phrase: str
) -> None:
    url = speech_file(tmp_path / "talk.wav", 60.0).as_uri()
    store = MemoryStore(watch_seconds=1.0)
    store.create_job(NS, audio_job("j", url))
    store.inject(fault)
    worker = audio_worker(store, tmp_path, 10.0, shard_bytes=SHARD_BYTES)
    if fault.op == "create_config_map":
        # a shard per chunk
        worker.transcription.transcripts = TranscriptStore(store, shard_bytes=400)
    run(worker, timeout=30)
    job = store.get_job(NS, "j")
    assert job is not None and job.status.phase == Phase.FAILED, store.dump()
    error = job.status.last_error
    assert error is not None and (error.reason, error.permanent) == ("TranscriptRefused", True)
    assert phrase in (error.message or "")
    assert "not retried" in (error.message or "")
    assert job.status.attempts == 1
    runs = engine_runs(tmp_path, "j")
    if fault.op == "create_config_map":
        assert "to store chunk 2" in (error.message or "")
        assert runs == [(1, 0), (1, 1), (1, 2)]  # stopped at the refusal, paid once
        assert store.calls.count(("create_config_map", "j-a1-2")) == 1  # never repeated
    else:
        assert runs == [(1, 0)]
    store.close()


def test_worker__a_refused_manifest_fails_before_any_engine_call(tmp_path: Path) -> None:
    url = speech_file(tmp_path / "talk.wav", 20.0).as_uri()
    store = MemoryStore(watch_seconds=1.0)
    store.create_job(NS, audio_job("j", url))
    store.inject(Fault("create_config_map", Forbidden(QUOTA, status=403), name="j-a1", times=9))
    run(audio_worker(store, tmp_path, 10.0), timeout=30)
    job = store.get_job(NS, "j")
    assert job is not None and job.status.phase == Phase.FAILED
    assert job.status.last_error is not None
    assert "to store the manifest" in (job.status.last_error.message or "")
    assert not (tmp_path / "chunks.jsonl").exists()  # nothing was paid for
    store.close()


def test_worker__a_refused_complete_keeps_the_checkpoint_the_next_attempt_needs(
    tmp_path: Path,
) -> None:
    """Reclaimed just before its complete: the job's checkpoint is this attempt's manifest,
    which the next attempt resumes from, so the worker must not delete it."""
    store = MemoryStore(watch_seconds=1.0)
    store.create_job(NS, job_manifest("a"))
    reclaimed: list[str] = []

    def reclaim_first(args: dict[str, Any]) -> bool:
        if args["patch"].get("phase") != "Succeeded" or reclaimed:
            return False
        reclaimed.append("a")
        job = store.get_job(NS, "a")
        assert job is not None and job.status.lease is not None
        seen = Observation(
            token=job.status.lease.token,
            renew_time=job.status.lease.renew_time,
            duration_seconds=job.status.lease.duration_seconds,
            observed_at=0.0,
        )
        fenced_write(
            store,
            NS,
            "a",
            lambda j: lease.reclaim(
                j.status, T0, 1e9, seen, budget=Budget(max_attempts=5, max_releases=10)
            ),
            action="reclaim",
        )
        return True

    store.inject(
        Fault("patch_job_status", Conflict("the object has been modified"), when=reclaim_first)
    )
    with capture_logs() as logs:
        run(make_worker(store, tmp_path, max_jobs=1))
    job = store.get_job(NS, "a")
    assert job is not None and job.status.phase == Phase.QUEUED and reclaimed
    assert job.status.progress is not None and job.status.progress.checkpoint == "a-a1"
    assert "complete_refused_transcript_kept" in [e["event"] for e in logs]
    checkpoint = TranscriptStore(store).read_checkpoint(NS, "a-a1")
    assert checkpoint.chunks == 2  # everything a next attempt needs is still there
    store.close()
