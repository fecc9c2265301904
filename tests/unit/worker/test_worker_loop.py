"""The real worker loop on the memory store with the simulated engine and a results store in
memory: jobs done, a lease lost mid-job, a lost answer of complete, a refusing results store, a
flaky API and a flaky store."""

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
from recall.bucket import Bucket, StoreAccessDenied, StoreUnavailable
from recall.engines.base import TranscribeRequest
from recall.engines.models import ModelCache
from recall.engines.simulated import SimulatedEngine
from recall.fencing import fenced_write
from recall.kube import Conflict, Unavailable
from recall.media import MediaOptions
from recall.media.types import Segment
from recall.protocol import lease
from recall.protocol.lease import Budget
from recall.protocol.observer import Observation
from recall.resources import Phase, TranscriptionJob
from recall.transcripts import (
    JobView,
    Record,
    directory_of,
    garbage,
    job_prefix,
    load_transcript,
    parse_scratch,
    read_checkpoint,
)
from recall.worker.attempt import STORE_DEPTH
from recall.worker.loop import Worker
from recall.worker.probes import PROBE_KEY
from recall_dev.twin.api import Fault, MemoryApi
from tests.unit.engines.test_models import DirStore, model_dir
from tests.unit.fakes import (
    NS,
    T0,
    BucketFault,
    FaultyBucket,
    assert_one_given_back,
    job_manifest,
    memory_bucket,
)


def make_worker(
    store: MemoryApi, tmp_path: Path, results: Bucket | None = None, **settings: object
) -> Worker:
    given: dict[str, Any] = {
        "idle_exit_seconds": 1.0,
        "self_serve_seconds": 0.2,
        "retry_base_seconds": 0.1,
        "simulated_record": tmp_path / "chunks.jsonl",
        **settings,
    }
    ws = WorkerSettings(id="w1", engine="simulated", **given)
    return Worker(
        store,
        ws,
        SimulatedEngine(chunks=2, chunk_delay_seconds=0, record_path=ws.simulated_record),
        namespace=NS,
        results=results if results is not None else memory_bucket(),
    )


def run(worker: Worker, timeout: float = 20.0) -> None:
    t = threading.Thread(target=worker.run)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "the worker did not finish"


def test_worker__does_every_job_once_and_references_its_transcript(tmp_path: Path) -> None:
    store = MemoryApi(watch_seconds=1.0)
    results = memory_bucket()
    for i in range(3):
        store.create_job(NS, job_manifest(f"j{i}"))
    run(make_worker(store, tmp_path, results))
    for i in range(3):
        job = store.get_job(NS, f"j{i}")
        assert job is not None and job.status.phase == Phase.SUCCEEDED
        assert job.status.result is not None and job.status.result.attempt == 1
        text = load_transcript(results, job.status.result.transcript)
        assert text is not None and f"j{i} chunk 1" in text.text
        assert job.status.progress is not None and job.status.progress.parts == []
    # The only API objects it wrote are the jobs' statuses and its registration.
    assert not store.list_config_maps(NS, "")
    store.close()


def test_worker__stops_when_its_lease_is_cancelled_mid_job(tmp_path: Path) -> None:
    store = MemoryApi(watch_seconds=1.0)
    store.create_job(
        NS,
        job_manifest(
            "slow",
            engine={"name": "simulated", "simulate": {"chunks": 50, "chunkDelaySeconds": 0.1}},
        ),
    )
    results = memory_bucket()
    worker = make_worker(store, tmp_path, results)
    t = threading.Thread(target=worker.run)
    t.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(engine_runs_so_far(tmp_path, "slow")) < 2:
        time.sleep(0.02)
    fenced_write(
        store,
        NS,
        "slow",
        lambda j: lease.cancel(j.status, j.status.started_at, reason="Test", message="m"),  # type: ignore[arg-type]
        action="cancel",
    )
    at_cancel = len(engine_runs_so_far(tmp_path, "slow"))
    t.join(20)
    assert not t.is_alive()
    job = store.get_job(NS, "slow")
    assert job is not None and job.status.phase == Phase.CANCELLED and job.status.result is None
    # No renewal was due (checkpoints every 10 s): the lease watch told the worker at once, and
    # the engine call in flight was the last one (50 chunks of 0.1 s would take 5 s).
    assert len(engine_runs(tmp_path, "slow")) <= at_cancel + 1
    # It wrote chunks, never a transcript; the operator's collection names all of it.
    keys = [o.key for o in results.list(job_prefix(NS, "slow", job.metadata.uid or ""))]
    assert keys and not any(k.endswith("transcript.json") for k in keys)
    view = JobView(NS, "slow", job.metadata.uid or "", job.status.effective_phase, 1)
    assert garbage(view, keys) == sorted(keys)
    store.close()


def test_worker__lost_answer_of_complete_keeps_the_transcript(tmp_path: Path) -> None:
    store = MemoryApi(watch_seconds=1.0)
    store.create_job(NS, job_manifest("a"))
    store.inject(
        Fault(
            "patch_job_status",
            Unavailable("read timed out", maybe_applied=True),
            applied=True,
            when=lambda args: args["patch"].get("phase") == "Succeeded",
        )
    )
    results = memory_bucket()
    run(make_worker(store, tmp_path, results))
    job = store.get_job(NS, "a")
    assert job is not None and job.status.phase == Phase.SUCCEEDED and job.status.result
    assert results.get(job.status.result.transcript) is not None
    store.close()


DENIED = StoreAccessDenied("put s3://recall/scratch/…: access denied (AccessDenied)")


def test_worker__a_refusing_results_store_fails_one_job_then_claims_nothing(
    tmp_path: Path,
) -> None:
    store = MemoryApi(watch_seconds=1.0)
    store.create_job(NS, job_manifest("a"))
    store.create_job(NS, job_manifest("b"))
    results = FaultyBucket()
    results.inject(BucketFault("put", DENIED, times=100))
    run(make_worker(store, tmp_path, results))
    jobs = {n: store.get_job(NS, n) for n in ("a", "b")}
    failed = [j for j in jobs.values() if j and j.status.phase == Phase.FAILED]
    assert len(failed) == 1, store.dump()
    error = failed[0].status.last_error
    assert error is not None and (error.reason, error.permanent) == ("StorageAccessDenied", True)
    assert "to store the cutting" in (error.message or "")
    assert failed[0].status.attempts == 1
    waiting = [j for j in jobs.values() if j and j.status.phase == Phase.QUEUED]
    assert len(waiting) == 1 and waiting[0].status.attempts == 0  # not burnt
    assert not (tmp_path / "chunks.jsonl").exists()  # no engine call was paid for
    store.close()


def test_worker__claims_again_once_a_probe_write_to_the_store_succeeds(tmp_path: Path) -> None:
    store = MemoryApi(watch_seconds=1.0)
    store.create_job(NS, job_manifest("a"))
    store.create_job(NS, job_manifest("b"))
    results = FaultyBucket()
    results.inject(BucketFault("put", DENIED, times=1, when=lambda key: key != PROBE_KEY))
    run(make_worker(store, tmp_path, results, store_probe_seconds=0.2, idle_exit_seconds=2.0))
    phases = sorted(str(store.get_job(NS, n).status.phase) for n in "ab")  # type: ignore[union-attr]
    assert phases == ["Failed", "Succeeded"]
    assert ("put", PROBE_KEY) in results.calls
    store.close()


class CachedModelEngine(SimulatedEngine):
    """The simulated engine, which first resolves a store model through a real `ModelCache`
    at each chunk, as local Whisper does."""

    def __init__(self, cache: ModelCache, **kw: Any) -> None:
        super().__init__(**kw)
        self.cache = cache

    def transcribe(self, request: TranscribeRequest) -> list[Segment]:
        self.cache.resolve("s3://models/x/", request.cancel)
        return super().transcribe(request)


def test_worker__an_unwritable_model_cache_gives_the_job_back_and_claims_nothing_until_it_can(
    tmp_path: Path,
) -> None:
    """The worker's fault is not the job's: the first job is released (its attempt given back,
    no lastError), the worker says `failed` with the reason in its registration and claims
    nothing until a probe writes to the cache; then both jobs are done, the model fetched
    once. The cache is a path under a regular file (the kernel's ENOTDIR, which denies root
    too; tests/unit/engines/test_models.py shows EACCES on a directory owned by root)."""
    store = MemoryApi(watch_seconds=1.0)
    store.create_job(NS, job_manifest("a"))
    store.create_job(NS, job_manifest("b"))
    blocker = tmp_path / "blocker"
    blocker.write_text("the cache's parent is a file")
    models = DirStore(model_dir(tmp_path))
    ws = WorkerSettings(
        id="w1",
        engine="simulated",
        idle_exit_seconds=2.0,
        self_serve_seconds=0.2,
        store_probe_seconds=0.2,
        retry_base_seconds=0.1,
    )
    engine = CachedModelEngine(
        ModelCache(blocker / "models", lambda url: models), chunks=2, chunk_delay_seconds=0
    )
    worker = Worker(store, ws, engine, namespace=NS, results=memory_bucket())
    seen: dict[str, Any] = {}

    def fix_the_cache_once_a_job_is_given_back() -> None:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            jobs = [store.get_job(NS, n) for n in "ab"]
            if any(j and j.status.releases for j in jobs):
                seen["state"] = worker.engine_state()
                time.sleep(0.7)  # three probes: the job waits Queued, claimable, unclaimed
                jobs = [store.get_job(NS, n) for n in "ab"]
                seen["claimed"] = sum(j.status.attempts for j in jobs if j)
                blocker.unlink()
                return
            time.sleep(0.02)

    fixer = threading.Thread(target=fix_the_cache_once_a_job_is_given_back)
    fixer.start()
    with capture_logs() as logs:
        run(worker, timeout=30)
    fixer.join(5)

    state = seen["state"]
    assert state.state == "failed" and state.reason == "ModelCacheUnwritable"
    assert str(blocker / "models") in state.error
    assert seen["claimed"] == 1, "the worker claimed nothing while its cache was unwritable"
    assert worker.engine_state().state != "failed"  # written again: the registration says so
    assert_one_given_back(store, "ab")
    assert sorted(models.downloads) == ["config.json", "model.bin"]  # fetched once
    events = [e["event"] for e in logs]
    assert events.count("model_cache_unwritable") == 1
    assert events.count("model_cache_still_unwritable") >= 2  # probed, and held back
    assert "model_cache_writable_again" in events and "failed" not in events


def test_worker__survives_a_flaky_api(tmp_path: Path) -> None:
    store = MemoryApi(watch_seconds=1.0)
    for i in range(2):
        store.create_job(NS, job_manifest(f"j{i}"))
    store.inject(Fault("patch_job_status", Unavailable("connection reset"), times=3))
    store.inject(Fault("list_jobs", Unavailable("503 starting"), times=2))
    results = FaultyBucket()
    results.inject(BucketFault("put", StoreUnavailable("503 Slow Down"), times=2))
    results.inject(
        BucketFault("put", StoreUnavailable("reset", maybe_applied=True), times=1, applied=True)
    )
    run(make_worker(store, tmp_path, results), timeout=30)
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
    store: MemoryApi,
    tmp_path: Path,
    chunk_seconds: float,
    results: Bucket,
    **kw: Any,
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
    return Worker(store, ws, engine, namespace=NS, results=results)


def audio_job(name: str, url: str, **simulate: Any) -> dict[str, Any]:
    return job_manifest(
        name,
        source={"url": url},
        engine={"name": "simulated", "simulate": {"chunkDelaySeconds": 0, **simulate}},
    )


def engine_runs_so_far(tmp_path: Path, job: str) -> list[tuple[int, int]]:
    return engine_runs(tmp_path, job) if (tmp_path / "chunks.jsonl").exists() else []


def engine_runs(tmp_path: Path, job: str) -> list[tuple[int, int]]:
    lines = (tmp_path / "chunks.jsonl").read_text().splitlines()
    return [(r["attempt"], r["chunk"]) for r in map(json.loads, lines) if r["job"] == job]


def stored(results: Bucket, job: TranscriptionJob) -> dict[int, dict[int, Record]]:
    """Every chunk record of `job` in the store, by attempt, then chunk index."""
    out: dict[int, dict[int, Record]] = {}
    for info in results.list(job_prefix(NS, job.name, job.metadata.uid or "")):
        key = parse_scratch(info.key)
        if key is not None and (index := key.chunk()) is not None:
            raw = results.get(info.key)
            assert raw is not None
            out.setdefault(key.attempt, {})[index] = Record.decode(raw)
    return out


def cuts(results: Bucket, job: TranscriptionJob) -> list[tuple[int, int]]:
    """The sample range of every chunk, in order, each from the first attempt that stored it
    (a resumed attempt carries the earlier chunks, it does not store them again)."""
    chunks: dict[int, Record] = {}
    for _, records in sorted(stored(results, job).items()):
        for index, record in records.items():
            chunks.setdefault(index, record)
    return [(chunks[i].first, chunks[i].end) for i in sorted(chunks)]


def end_backoff(store: MemoryApi, name: str) -> None:
    """What the operator does once the retry delay has passed on its clock."""
    fenced_write(store, NS, name, lambda j: lease.end_backoff(j.status), action="end_backoff")


def simulated_jobs(*names: str, chunks: int, delay: float, **spec: Any) -> tuple[MemoryApi, Bucket]:
    """A memory API server holding a job of the simulated engine (`chunks` chunks, `delay` s
    each) per name, and an empty results bucket."""
    store, results = MemoryApi(watch_seconds=1.0), memory_bucket()
    simulate = {"chunks": chunks, "chunkDelaySeconds": delay}
    for name in names:
        store.create_job(
            NS, job_manifest(name, engine={"name": "simulated", "simulate": simulate}, **spec)
        )
    return store, results


def succeeded(store: MemoryApi, name: str) -> TranscriptionJob:
    job = store.get_job(NS, name)
    assert job is not None and job.status.phase == Phase.SUCCEEDED, store.dump()
    assert job.status.result is not None
    return job


def test_worker__a_resumed_attempt_continues_exactly_after_the_checkpoint(tmp_path: Path) -> None:
    url = speech_file(tmp_path / "talk.wav", 98.0).as_uri()
    store, results = MemoryApi(watch_seconds=1.0), memory_bucket()
    store.create_job(
        NS, audio_job("resumed", url, failure="retriable", failAtChunk=4, failAttempts=1)
    )
    run(audio_worker(store, tmp_path, 10.0, results, max_jobs=1), timeout=30)  # attempt 1 fails
    end_backoff(store, "resumed")
    store.create_job(NS, audio_job("whole", url))
    with capture_logs() as logs:
        run(audio_worker(store, tmp_path, 10.0, results), timeout=60)
    assert [e["by"] for e in logs if e["event"] == "media_resumed"] == ["seek"]

    whole, resumed = succeeded(store, "whole"), succeeded(store, "resumed")
    n = len(cuts(results, whole))
    assert engine_runs(tmp_path, "resumed") == [(1, 0), (1, 1), (1, 2), (1, 3)] + [
        (2, i) for i in range(4, n)
    ]
    assert resumed.status.result.attempt == 2  # type: ignore[union-attr]
    # The same cuts as the uninterrupted run: no gap, no overlap, nothing cut differently.
    whole_cuts = cuts(results, whole)
    assert cuts(results, resumed) == whole_cuts
    assert whole_cuts[0][0] == 0
    assert all(a[1] == b[0] for a, b in itertools.pairwise(whole_cuts))
    a = load_transcript(results, whole.status.result.transcript)  # type: ignore[union-attr]
    b = load_transcript(results, resumed.status.result.transcript)  # type: ignore[union-attr]
    assert a is not None and b is not None and a.segments == b.segments
    assert resumed.status.progress is not None
    assert (resumed.status.progress.chunks_done, resumed.status.progress.chunks_total) == (n, n)
    assert n > 10  # snapped cuts: more than 95 s / 10 s
    # Stored once: the second attempt stored only the chunks after the checkpoint.
    by_attempt = stored(results, resumed)
    assert sorted(by_attempt[1]) == [0, 1, 2, 3] and min(by_attempt[2]) == 4
    store.close()


@pytest.mark.parametrize("change", ["chunk_seconds", "source"])
def test_worker__a_resume_with_other_settings_or_source_starts_over(
    tmp_path: Path, change: str
) -> None:
    path = speech_file(tmp_path / "talk.wav", 60.0)
    store, results = MemoryApi(watch_seconds=1.0), memory_bucket()
    store.create_job(
        NS, audio_job("j", path.as_uri(), failure="retriable", failAtChunk=3, failAttempts=1)
    )
    run(audio_worker(store, tmp_path, 10.0, results, max_jobs=1), timeout=30)
    job = store.get_job(NS, "j")
    assert job is not None and job.status.phase == Phase.QUEUED
    assert job.status.progress is not None and job.status.progress.chunks_done == 3
    assert [p.end for p in job.status.progress.parts] == [3]

    end_backoff(store, "j")
    if change == "source":
        speech_file(path, 60.0, seed=1)  # rewritten: another mtime and other samples
    seconds = 15.0 if change == "chunk_seconds" else 10.0
    with capture_logs() as logs:
        run(audio_worker(store, tmp_path, seconds, results), timeout=30)
    job = succeeded(store, "j")
    discarded = [e for e in logs if e["event"] == "checkpoint_discarded"]
    expected = "chunk_seconds 10 → 15" if change == "chunk_seconds" else "the source changed"
    assert [e["reason"] for e in discarded] == [expected]
    assert next(c for a, c in engine_runs(tmp_path, "j") if a == 2) == 0  # from the start
    # Nothing of the first attempt is mixed in: every cut is the new cutting's, from sample 0.
    store.create_job(NS, audio_job("fresh", path.as_uri()))
    run(audio_worker(store, tmp_path, seconds, results), timeout=30)
    second = stored(results, job)[2]
    fresh = succeeded(store, "fresh")
    assert [(r.first, r.end) for _, r in sorted(second.items())] == cuts(results, fresh)
    store.close()


@pytest.mark.parametrize("at", [0, 2], ids=["first-chunk", "third-chunk"])
def test_worker__a_refusing_store_fails_the_job_at_once_without_paying_again(
    tmp_path: Path, at: int
) -> None:
    url = speech_file(tmp_path / "talk.wav", 60.0).as_uri()
    store = MemoryApi(watch_seconds=1.0)
    store.create_job(NS, audio_job("j", url))
    results = FaultyBucket()
    chunk = f"c{at:06d}.json"
    results.inject(BucketFault("put", DENIED, times=99, when=lambda key: key.endswith(chunk)))
    run(audio_worker(store, tmp_path, 10.0, results), timeout=30)
    job = store.get_job(NS, "j")
    assert job is not None and job.status.phase == Phase.FAILED, store.dump()
    error = job.status.last_error
    assert error is not None and (error.reason, error.permanent) == ("StorageAccessDenied", True)
    assert f"to store chunk {at}" in (error.message or "")
    assert "not retried" in (error.message or "")
    assert job.status.attempts == 1
    # Paid once each; the engine ran ahead of the store by the pipeline's depth at most.
    runs = engine_runs(tmp_path, "j")
    assert runs == [(1, i) for i in range(len(runs))]
    assert at + 1 <= len(runs) <= at + 1 + STORE_DEPTH + 1
    assert sum(1 for op, key in results.calls if op == "put" and key.endswith(chunk)) == 1
    store.close()


def test_worker__a_refused_first_write_fails_before_any_engine_call(tmp_path: Path) -> None:
    url = speech_file(tmp_path / "talk.wav", 20.0).as_uri()
    store = MemoryApi(watch_seconds=1.0)
    store.create_job(NS, audio_job("j", url))
    results = FaultyBucket()
    results.inject(BucketFault("put", DENIED, times=9))
    run(audio_worker(store, tmp_path, 10.0, results), timeout=30)
    job = store.get_job(NS, "j")
    assert job is not None and job.status.phase == Phase.FAILED
    assert job.status.last_error is not None
    assert "to store the cutting" in (job.status.last_error.message or "")
    assert not (tmp_path / "chunks.jsonl").exists()  # nothing was paid for
    store.close()


def test_worker__a_slow_or_down_store_delays_the_job_and_never_ends_the_worker(
    tmp_path: Path,
) -> None:
    store = MemoryApi(watch_seconds=1.0)
    store.create_job(NS, job_manifest("a"))
    results = FaultyBucket()
    down = StoreUnavailable("connection refused")
    results.inject(
        BucketFault("put", down, times=12, when=lambda key: key.endswith("c000001.json"))
    )
    run(make_worker(store, tmp_path, results), timeout=40)
    job = succeeded(store, "a")
    assert job.status.attempts == 1  # the same attempt rode it out: the lease held
    store.close()


def test_worker__a_refused_complete_leaves_the_checkpoint_the_next_attempt_needs(
    tmp_path: Path,
) -> None:
    """Reclaimed just before its complete: the job's checkpoint (written on the cadence, here
    every second) names this attempt's chunks, which the next attempt resumes from; the worker
    deletes nothing in the store."""
    store, results = simulated_jobs("a", chunks=8, delay=0.25, checkpointSeconds=1)
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
        run(make_worker(store, tmp_path, results, max_jobs=1))
    job = store.get_job(NS, "a")
    assert job is not None and job.status.phase == Phase.QUEUED and reclaimed
    assert job.status.progress is not None
    ((attempt, first, end),) = [(p.attempt, p.first, p.end) for p in job.status.progress.parts]
    assert (attempt, first) == (1, 0) and 3 <= end <= 8  # checkpoints at ~1 s and ~2 s
    assert "complete_refused_transcript_left" in [e["event"] for e in logs]
    assert read_checkpoint(results, job).chunks == end  # everything a next attempt needs
    part = job.status.progress.parts[0]
    transcript = directory_of(job, part.attempt, part.token) + "transcript.json"
    assert results.get(transcript) is not None  # left for the operator's collection
    store.close()


def batched_settings(tmp_path: Path, **settings: Any) -> WorkerSettings:
    """A worker of the simulated engine taking 4 chunks a call, its record in `tmp_path`."""
    return WorkerSettings(
        id="w1",
        engine="simulated",
        idle_exit_seconds=1.0,
        self_serve_seconds=0.2,
        simulated_record=tmp_path / "chunks.jsonl",
        batch_size=4,
        **settings,
    )


class CountingEngine(SimulatedEngine):
    """The simulated engine, counting its calls and the chunks each took."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.calls: list[list[int]] = []

    def transcribe_batch(self, request: TranscribeRequest) -> Any:
        self.calls.append([c.index for c in request.chunks])
        return super().transcribe_batch(request)


def test_worker__a_batched_engine_takes_a_job_s_chunks_in_groups_and_stores_each(
    tmp_path: Path,
) -> None:
    """batch_size 4 over 10 chunks: three calls (4, 4, 2), every chunk stored once, in order,
    and a checkpoint names the chunks a batch held like any others."""
    store, results = simulated_jobs("b", chunks=10, delay=0.2, checkpointSeconds=1)
    ws = batched_settings(tmp_path)
    engine = CountingEngine(
        chunks=2, chunk_delay_seconds=0, record_path=ws.simulated_record, batch_size=4
    )
    with capture_logs() as logs:
        run(Worker(store, ws, engine, namespace=NS, results=results), timeout=30)
    job = succeeded(store, "b")
    assert engine.calls == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    # what the job's `completed` line says (tests/e2e/test_batched_transcription.py reads it)
    assert [(e["engine_calls"], e["chunks"]) for e in logs if e["event"] == "completed"] == [
        (3, 10)
    ]
    assert engine_runs(tmp_path, "b") == [(1, i) for i in range(10)]
    assert job.status.result is not None
    transcript = load_transcript(results, job.status.result.transcript)
    assert transcript is not None
    assert [int(s.text.split()[2]) for s in transcript.segments] == list(range(10))
    store.close()


class GatedEngine(CountingEngine):
    """A batched engine whose second call of attempt 1 blocks until the call is cancelled (the
    lease lost, the grace over): the attempt ends in the middle of that batch."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.entered = threading.Event()

    def transcribe_batch(self, request: TranscribeRequest) -> Any:
        if request.attempt == 1 and len(self.calls) == 1:
            self.calls.append([c.index for c in request.chunks])
            self.entered.set()
            request.cancel.wait(30)
            return []  # too late: the worker stopped waiting for this call
        return super().transcribe_batch(request)


def reclaim_now(store: MemoryApi, name: str) -> None:
    """The operator's reclaim, as if it had seen the lease it reads expire."""

    def expired(job: TranscriptionJob) -> lease.Decision:
        held = job.status.lease
        assert held is not None
        seen = Observation(
            token=held.token,
            renew_time=held.renew_time,
            duration_seconds=held.duration_seconds,
            observed_at=0.0,
        )
        return lease.reclaim(
            job.status, T0, 1e9, seen, budget=Budget(max_attempts=5, max_releases=10)
        )

    assert fenced_write(store, NS, name, expired, action="reclaim").applied


@pytest.mark.parametrize("end", ["lease_lost", "stopped"])
def test_worker__batched_attempt_ended_mid_batch_resumes_exactly_after_the_stored_batches(
    tmp_path: Path, end: str
) -> None:
    """batch_size 4 over 12 chunks: attempt 1 transcribes and stores the batch 0-3, then loses
    its lease (a reclaim) or is stopped (grace 0, a release) in the middle of the batch 4-7.
    The checkpoint names chunks 0-3, the chunks the batches it stored hold; attempt 2 starts
    its first call at chunk 4 with a whole batch: no chunk redone, none skipped, each stored
    once."""
    store, results = simulated_jobs("b", chunks=12, delay=0.05, checkpointSeconds=1)

    def worker(engine: CountingEngine, **kw: Any) -> Worker:
        ws = batched_settings(tmp_path, **kw)
        return Worker(store, ws, engine, namespace=NS, results=results)

    def engine(cls: type[CountingEngine]) -> CountingEngine:
        record = tmp_path / "chunks.jsonl"
        return cls(chunks=2, chunk_delay_seconds=0, record_path=record, batch_size=4)

    def checkpointed() -> int:
        job = store.get_job(NS, "b")
        progress = job.status.progress if job is not None else None
        return progress.chunks_done if progress is not None else 0

    gated = engine(GatedEngine)
    assert isinstance(gated, GatedEngine)
    first = worker(gated, grace_seconds=0.0)
    t = threading.Thread(target=first.run)
    with capture_logs() as logs:
        t.start()
        assert gated.entered.wait(10), "the second batch never started"
        if end == "lease_lost":
            deadline = time.monotonic() + 10
            while checkpointed() < 4 and time.monotonic() < deadline:
                time.sleep(0.05)  # the heartbeater carries the checkpoint within ~1 s
            assert checkpointed() == 4
            reclaim_now(store, "b")  # the same worker takes the job again: attempt 2
            again: CountingEngine = gated
        else:
            first.stop()  # grace 0: the call in flight is abandoned, the lease released
            t.join(10)
            again = engine(CountingEngine)
            worker(again).run()
        t.join(20)
    assert not t.is_alive()

    job = succeeded(store, "b")
    assert job.status.result is not None and job.status.result.attempt == 2
    if end == "lease_lost":
        assert (job.status.expired_leases, job.status.releases) == (1, 0)
    else:
        assert (job.status.expired_leases, job.status.releases) == (0, 1)
    assert [e["chunks_done"] for e in logs if e["event"] == "resumed"] == [4]
    assert gated.calls[:2] == [[0, 1, 2, 3], [4, 5, 6, 7]]  # the second, cut short
    assert again.calls[-2:] == [[4, 5, 6, 7], [8, 9, 10, 11]]  # attempt 2: whole batches
    # Paid once a chunk (the abandoned call made no record) and stored once: attempt 1 the
    # chunks of its stored batch, attempt 2 every other.
    assert engine_runs(tmp_path, "b") == [(1, i) for i in range(4)] + [(2, i) for i in range(4, 12)]
    by_attempt = stored(results, job)
    assert (sorted(by_attempt[1]), sorted(by_attempt[2])) == (list(range(4)), list(range(4, 12)))
    transcript = load_transcript(results, job.status.result.transcript)
    assert transcript is not None
    assert [int(s.text.split()[2]) for s in transcript.segments] == list(range(12))
    store.close()


@pytest.mark.parametrize(("batch", "decode", "store"), [(1, 2, 4), (3, 3, 6), (8, 8, 16)])
def test_worker__pipeline_depths_follow_the_batch_as_docs_pace_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: int, decode: int, store: int
) -> None:
    """The decode stage holds max(2, batch) chunks, the store stage max(4, 2 × batch): what
    docs/pace.md and docs/gpu.md give as the worker's memory bound."""
    from recall.worker import pipeline

    depths: dict[str, int] = {}

    class Decoder(pipeline.Decoder):
        def __init__(self, *a: Any, depth: int, **kw: Any) -> None:
            depths["decode"] = depth
            super().__init__(*a, depth=depth, **kw)

    class Storer(pipeline.Storer):
        def __init__(self, *a: Any, depth: int, **kw: Any) -> None:
            depths["store"] = depth
            super().__init__(*a, depth=depth, **kw)

    monkeypatch.setattr("recall.worker.attempt.Decoder", Decoder)
    monkeypatch.setattr("recall.worker.attempt.Storer", Storer)
    memory = MemoryApi(watch_seconds=1.0)
    memory.create_job(NS, job_manifest("d"))
    engine = CountingEngine(chunks=2, chunk_delay_seconds=0, batch_size=batch)
    ws = WorkerSettings(
        id="w1", engine="simulated", idle_exit_seconds=0.5, self_serve_seconds=0.1,
        batch_size=batch,
    )  # fmt: skip
    run(Worker(memory, ws, engine, namespace=NS, results=memory_bucket()))
    succeeded(memory, "d")
    assert depths == {"decode": decode, "store": store}
    memory.close()


def test_worker__slots_hold_several_leases_at_once_each_its_own(tmp_path: Path) -> None:
    """Three slots, six jobs of 0.6 s: up to three leases held at once by the one worker, each
    with its own token; every job done once; two slots never claim the same job."""
    store, results = simulated_jobs(*(f"s{i}" for i in range(6)), chunks=3, delay=0.2)
    worker = make_worker(store, tmp_path, results, slots=3)
    t = threading.Thread(target=worker.run)
    t.start()
    most = 0
    while t.is_alive():
        leased = [j for j in store.list_jobs(NS).items if (j.get("status") or {}).get("lease")]
        most = max(most, len(leased))
        time.sleep(0.02)
    t.join()
    assert most == 3
    tokens = set()
    for i in range(6):
        job = succeeded(store, f"s{i}")
        assert job.status.attempts == 1 and job.status.result is not None
        assert job.status.result.worker == "w1"
        tokens.add(job.status.result.token)
    assert len(tokens) == 6
    assert worker.claims == 6 and worker.claim_conflicts == 0
    runs = engine_runs(tmp_path, "s0") + engine_runs(tmp_path, "s5")
    assert sorted(runs) == sorted([(1, c) for c in range(3)] * 2)
    store.close()


@pytest.mark.parametrize("max_jobs", [1, 2])
def test_worker__max_jobs_bounds_the_claims_of_all_its_slots_together(
    tmp_path: Path, max_jobs: int
) -> None:
    """Three slots, five jobs of 0.6 s: a worker of `max_jobs` claims that many jobs in all,
    not one a slot, does them, and exits; the others stay Queued, never attempted."""
    names = [f"m{i}" for i in range(5)]
    store, results = simulated_jobs(*names, chunks=3, delay=0.2)
    worker = make_worker(store, tmp_path, results, slots=3, max_jobs=max_jobs)
    run(worker)
    jobs = [store.get_job(NS, name) for name in names]
    done = [j for j in jobs if j is not None and j.status.phase == Phase.SUCCEEDED]
    untouched = [
        j
        for j in jobs
        if j is not None and j.status.phase == Phase.QUEUED and not j.status.attempts
    ]
    assert (len(done), len(untouched)) == (max_jobs, 5 - max_jobs), store.dump()
    assert (worker.claims, worker.slots.done) == (max_jobs, max_jobs)
    store.close()
