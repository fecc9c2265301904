"""The language of a file is detected once, early, and survives a resume: the real worker loop
on the memory store, with a simulated engine that detects a language."""

from __future__ import annotations

import json
from pathlib import Path

from recall.engines.base import Detected, TranscribeRequest
from recall.engines.simulated import SimulatedEngine
from recall.fencing import fenced_write
from recall.protocol import lease
from recall.resources import Phase, TranscriptionJob
from recall.transcripts import (
    Record,
    Transcript,
    job_prefix,
    load_transcript,
    parse_scratch,
    render,
)
from recall_dev.twin.api import MemoryApi
from tests.unit.fakes import NS, engine_calls, job_manifest, memory_bucket, run_one_job


class Detecting(SimulatedEngine):
    """Hears no speech in chunk 0, French from chunk 1 on; remembers who asked what (and
    records every transcribe call in `record`)."""

    def __init__(self, record: Path) -> None:
        super().__init__(chunks=6, chunk_delay_seconds=0, record_path=record)
        self.asked: list[tuple[int, int]] = []  # (attempt, chunk) of each detect_language

    def detect_language(self, request: TranscribeRequest) -> Detected | None:
        self.asked.append((request.job.status.attempts, request.chunk.index))
        return None if request.chunk.index == 0 else Detected("fr", 0.93)


def test_language__detected_once_at_the_first_speech_and_kept_across_a_resume(
    tmp_path: Path,
) -> None:
    store, results = MemoryApi(watch_seconds=1.0), memory_bucket()
    simulate = {
        "chunks": 6,
        "chunkDelaySeconds": 0,
        "failure": "retriable",
        "failAtChunk": 4,
        "failAttempts": 1,
    }
    store.create_job(
        NS,
        job_manifest("talk", language="auto", engine={"name": "simulated", "simulate": simulate}),
    )
    recorded = tmp_path / "calls.jsonl"
    engine = Detecting(recorded)
    run_one_job(store, engine, results)  # attempt 1 fails at chunk 4, after storing chunks 0-3
    fenced_write(store, NS, "talk", lambda j: lease.end_backoff(j.status), action="end_backoff")
    run_one_job(store, engine, results)  # attempt 2 resumes at chunk 4
    job = store.get_job(NS, "talk")
    assert job is not None and job.status.phase == Phase.SUCCEEDED, store.dump()
    assert job.status.result is not None and job.status.result.attempt == 2

    assert engine.asked == [(1, 0), (1, 1)]  # chunk 0 had no speech; never asked again
    calls = engine_calls(recorded)
    assert [c.language for c in calls if c.chunk == 0] == ["auto"]
    assert all(c.language == "fr" for c in calls if c.chunk > 0)
    assert {c.chunk for c in calls if c.attempt == 2} == {4, 5}  # resumed, not redone

    result = job.status.result
    assert (result.language, result.language_probability) == ("fr", 0.93)
    transcript = load_transcript(results, result.transcript)
    assert transcript is not None and transcript.language == "fr"
    keys = [o.key for o in results.list(job_prefix(NS, "talk", job.metadata.uid or ""))]
    chunk_1 = next(
        k for k in keys if (sk := parse_scratch(k)) and sk.attempt == 1 and sk.chunk() == 1
    )
    record = Record.decode(results.get(chunk_1) or b"")
    assert (record.language, record.language_probability) == ("fr", 0.93)  # in the checkpoint
    store.close()


class OwnLanguage(SimulatedEngine):
    """An English-only model's answer to a job without a language: its own, not detected."""

    def detect_language(self, request: TranscribeRequest) -> Detected | None:
        return Detected("en", None)


def transcribed(
    engine: SimulatedEngine, **spec: object
) -> tuple[TranscriptionJob, Transcript, Record]:
    """One job through the worker loop: the job, its transcript, and its chunk 0's record."""
    store, results = MemoryApi(watch_seconds=1.0), memory_bucket()
    store.create_job(NS, job_manifest("talk", **spec))
    try:
        run_one_job(store, engine, results)
        job = store.get_job(NS, "talk")
        assert job is not None and job.status.phase == Phase.SUCCEEDED, store.dump()
        assert job.status.result is not None
        transcript = load_transcript(results, job.status.result.transcript)
        assert transcript is not None
        keys = [o.key for o in results.list(job_prefix(NS, "talk", job.metadata.uid or ""))]
        chunk_0 = next(k for k in keys if (sk := parse_scratch(k)) and sk.chunk() == 0)
        return job, transcript, Record.decode(results.get(chunk_0) or b"")
    finally:
        store.close()


def test_language__a_models_own_language_is_recorded_without_a_probability() -> None:
    """No language asked, an English-only model: English, with no probability (nothing was
    detected), in the result, the chunk records and the transcript."""
    job, transcript, record = transcribed(OwnLanguage(chunks=2, chunk_delay_seconds=0))
    result = job.status.result
    assert result is not None
    assert (result.language, result.language_probability) == ("en", None)
    assert (record.language, record.language_probability) == ("en", None)
    assert json.loads(record.encode())["language"] == ["en", None]
    data = json.loads(render(transcript, "json"))
    assert (data["language"], data["languageProbability"]) == ("en", None)


def test_language__auto_without_a_detection_records_no_language() -> None:
    """`auto` on an engine that detects nothing: the result and the outputs name no language
    (never "auto"), and no probability."""
    engine = SimulatedEngine(chunks=2, chunk_delay_seconds=0)
    job, transcript, record = transcribed(engine, language="auto")
    result = job.status.result
    assert result is not None
    assert (result.language, result.language_probability) == (None, None)
    assert record.language is None and transcript.language is None
    assert json.loads(render(transcript, "json"))["language"] is None
    assert "language_code" not in json.loads(render(transcript, "aws.json"))["results"]


def test_language__a_batch_after_its_silent_first_chunk_is_transcribed_in_the_detected_one(
    tmp_path: Path,
) -> None:
    """Batches of 4, chunk 0 silent: the worker asks the batch's next chunk, and every chunk,
    the silent one too, is transcribed in the detected language; never `auto`."""
    store, results = MemoryApi(watch_seconds=1.0), memory_bucket()
    simulate = {"chunks": 6, "chunkDelaySeconds": 0}
    store.create_job(
        NS,
        job_manifest("talk", language="auto", engine={"name": "simulated", "simulate": simulate}),
    )
    recorded = tmp_path / "calls.jsonl"
    engine = Detecting(recorded)
    engine.batch_size = 4
    try:
        run_one_job(store, engine, results)
        job = store.get_job(NS, "talk")
        assert job is not None and job.status.phase == Phase.SUCCEEDED, store.dump()
    finally:
        store.close()
    assert engine.asked == [(1, 0), (1, 1)]
    assert [(c.chunk, c.language) for c in engine_calls(recorded)] == [(i, "fr") for i in range(6)]
    assert job.status.result is not None
    assert (job.status.result.language, job.status.result.language_probability) == ("fr", 0.93)


class FrenchAfterSilence(SimulatedEngine):
    """No speech in chunk 0, French from chunk 1 on."""

    def detect_language(self, request: TranscribeRequest) -> Detected | None:
        return None if request.chunk.index == 0 else Detected("fr", 0.93)


def test_language__one_batch_of_every_chunk_records_the_language_detected_in_it() -> None:
    """All chunks in one batch, the first silent: the result records the language."""
    engine = FrenchAfterSilence(chunks=2, chunk_delay_seconds=0, batch_size=8)
    job, transcript, record = transcribed(engine, language="auto")
    assert job.status.result is not None
    assert job.status.result.language == "fr" and transcript.language == "fr"
    assert (record.language, record.language_probability) == ("fr", 0.93)  # chunk 0's record
