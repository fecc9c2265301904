"""What a transcript is worth, measured with the bundled tiny.en on speech whose truth is known.

- Word timing: four passages of 77 words synthesized one by one with espeak-ng and joined
  with random silences (0.12-0.6 s), so each word's true start is known to the sample
  (`recall_dev.timed_speech`). Each is transcribed chunk by chunk as a worker does, all but
  the first chunk from a resume (a new media seeking to the checkpointed cut, as a second
  attempt would): word times are absolute, in order, inside their segments, and 90 % of the
  words the model got right (a word error rate's alignment) start within 0.25 s of the truth.
- Word timing across a real resume: one passage through the real worker loop (an API server
  and a results store in memory), once uninterrupted and once failing after its first chunk
  was stored, so the second attempt resumes from the checkpoint the store holds: its words and
  their absolute times are the uninterrupted run's, and as accurate.
- Vocabulary: sentences with six invented names; with the names as the job's vocabulary the
  model writes far more of them right.

`espeak-ng` is a required system package (hack/install-system-deps.sh): without it these
tests fail rather than skip. No cluster is needed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from recall.base.settings import StoreSettings, WorkerSettings
from recall.bucket import Stores
from recall.engines.base import TranscribeRequest
from recall.engines.whisper import WhisperEngine
from recall.fencing import fenced_write
from recall.media.types import Segment
from recall.protocol import lease
from recall.resources import Phase, TranscriptionJob
from recall.resources.errors import JobFailure
from recall.transcripts import load_transcript
from recall.worker.loop import Worker
from recall_dev import speech, timed_speech
from recall_dev.twin.api import MemoryApi
from tests.helpers import manifest

pytestmark = pytest.mark.slow

WITHIN = 0.25  # seconds
SHARE = 0.90  # of the words the model got right


def job_for(path: Path, **spec: Any) -> TranscriptionJob:
    return TranscriptionJob.from_api(
        {
            "metadata": {"name": "quality"},
            "spec": {"source": {"url": path.as_uri()}, "language": "en", **spec},
        }
    )


@pytest.fixture(scope="module")
def engine() -> WhisperEngine:
    return WhisperEngine()


def test_words__within_a_quarter_second_across_chunks_and_a_resume(
    engine: WhisperEngine,
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    """Four passages (the same words, other silences between them), ~1 minute each."""
    errors: list[float] = []
    spoken = 0
    for seed in range(4):
        words, gaps = timed_speech.passage(seed=seed)
        path = tmp_path / f"words-{seed}.wav"
        try:
            truth = timed_speech.speak(words, path, gaps=gaps)
        except speech.SpeechUnavailable as e:
            pytest.fail(str(e))
        segments = timed_speech.transcribed_with_a_resume(engine, path)
        starts = [w.start for s in segments for w in s.words or []]
        assert starts == sorted(starts), "word times go back"
        for s in segments:
            assert s.words, f"a segment without words: {s.text!r}"
            assert all(s.start <= w.start <= w.end <= s.end for w in s.words)
            assert s.confidence is not None and 0 < s.confidence <= 1
        found = timed_speech.errors_of(truth, segments)
        assert len(found) >= 0.6 * len(truth), "too few words recognised to judge their times"
        errors += found
        spoken += len(truth)
    within = sum(abs(e) <= WITHIN for e in errors) / len(errors)
    record_property("words_matched", f"{len(errors)}/{spoken}")
    record_property("share_within_quarter_second", round(within, 3))
    print(f"\nword starts: {len(errors)}/{spoken} words matched, {within:.1%} within {WITHIN} s")
    assert within >= SHARE, f"{within:.1%} of word starts within {WITHIN} s: {sorted(errors)}"


def test_vocabulary__lowers_the_error_rate_on_invented_names(
    engine: WhisperEngine, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    wav = tmp_path / "names.wav"
    try:
        speech.synthesize(timed_speech.NAME_SENTENCES, wav)
    except speech.SpeechUnavailable as e:
        pytest.fail(str(e))
    rates = {}
    for name, vocabulary in (("without", None), ("with", timed_speech.NAMES)):
        job = job_for(wav, vocabulary=vocabulary) if vocabulary else job_for(wav)
        text = []
        with engine.load_media(job) as media:
            for chunk in media.chunks():
                found = engine.transcribe(
                    TranscribeRequest.of(
                        chunk, language="en", cancel=threading.Event(), job=job, attempt=1
                    )
                )
                text += [s.text for s in found]
        rates[name] = timed_speech.name_errors(" ".join(text))
    record_property("name_error_rate_without_vocabulary", round(rates["without"], 3))
    record_property("name_error_rate_with_vocabulary", round(rates["with"], 3))
    print(f"\nname error rate: {rates['without']:.0%} without, {rates['with']:.0%} with vocabulary")
    assert rates["with"] <= rates["without"] / 2, rates
    assert rates["with"] <= 0.4, rates


class InterruptedOnce(WhisperEngine):
    """Local Whisper whose first attempt at a job named "resumed…" fails at chunk `at` (a
    retriable failure, after the chunks before it were stored): the second attempt resumes
    from the checkpoint."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at
        self.calls: list[tuple[str, int, int]] = []  # (job, attempt, chunk) of each transcribe

    def transcribe(self, request: TranscribeRequest) -> list[Segment]:
        job, attempt, chunk = request.job, request.attempt, request.chunk
        self.calls.append((job.name, attempt, chunk.index))
        if attempt == 1 and chunk.index == self.at and job.name.startswith("resumed"):
            raise JobFailure("Interrupted", f"interrupted at chunk {chunk.index}", permanent=False)
        return super().transcribe(request)


def through_the_worker(engine: WhisperEngine, path: Path, name: str) -> tuple[int, list[Segment]]:
    """`path` transcribed with words as job `name` by the real worker loop (a memory API
    server and results store), attempt after attempt until it succeeds: the attempt that
    completed and the transcript's segments."""
    store, results = (
        MemoryApi(watch_seconds=1.0),
        Stores(StoreSettings(url="memory://r")).results(),
    )
    store.create_job(
        "default",
        manifest(
            "TranscriptionJob",
            name,
            {
                "source": {"url": path.as_uri()},
                "language": "en",
                "transcript": {"words": True},
                "engine": {"name": "whisper", "chunkSeconds": 20},
                "leaseDurationSeconds": 30,
            },
        ),
    )
    settings = WorkerSettings(
        id="w1", engine="whisper", idle_exit_seconds=1.0, self_serve_seconds=0.2, max_jobs=1
    )
    try:
        for attempt in (1, 2):
            Worker(store, settings, engine, namespace="default", results=results).run()
            job = store.get_job("default", name)
            assert job is not None
            if attempt == 1 and job.status.phase == Phase.QUEUED:  # failed: retried at once
                fenced_write(
                    store,
                    "default",
                    name,
                    lambda j: lease.end_backoff(j.status),
                    action="end_backoff",
                )
                continue
            result = job.status.result
            assert job.status.phase == Phase.SUCCEEDED and result, store.dump()
            transcript = load_transcript(results, result.transcript)
            assert transcript is not None
            return result.attempt or 0, transcript.segments
        raise AssertionError(f"{name} did not succeed in two attempts: {store.dump()}")
    finally:
        store.close()


def test_words__survive_a_checkpoint_resume_through_the_worker(tmp_path: Path) -> None:
    """One passage (~55 s, three 20 s chunks) through the real worker loop twice: once
    uninterrupted, once failing at chunk 1 of its first attempt so the second resumes from the
    checkpoint in the store (chunk 0 read back, the media cut again from the recorded sample,
    the context from the checkpoint). The words and their absolute times are those of the
    uninterrupted run, in order, inside their segments, and as accurate."""
    words, gaps = timed_speech.passage(seed=1)
    path = tmp_path / "words.wav"
    try:
        truth = timed_speech.speak(words, path, gaps=gaps)
    except speech.SpeechUnavailable as e:
        pytest.fail(str(e))
    engine = InterruptedOnce(at=1)
    whole_attempt, whole = through_the_worker(engine, path, "whole")
    resumed_attempt, resumed = through_the_worker(engine, path, "resumed")
    assert (whole_attempt, resumed_attempt) == (1, 2)
    second = [c for job, a, c in engine.calls if job == "resumed" and a == 2]
    assert second[0] == 1 and len(second) >= 2, engine.calls  # resumed at chunk 1

    def timed(segments: list[Segment]) -> list[tuple[str, float, float]]:
        return [(w.text, w.start, w.end) for s in segments for w in s.words or []]

    assert timed(resumed) == timed(whole)
    starts = [start for _, start, _ in timed(resumed)]
    assert starts == sorted(starts), "word times go back"
    assert any(start > 40.0 for start in starts)  # absolute, in the chunks after the resume
    for s in resumed:
        assert s.words and all(s.start <= w.start <= w.end <= s.end for w in s.words)
    found = timed_speech.errors_of(truth, resumed)
    assert len(found) >= 0.6 * len(truth), "too few words recognised to judge their times"
    within = sum(abs(e) <= WITHIN for e in found) / len(found)
    print(f"\nresumed through the worker: {within:.1%} of word starts within {WITHIN} s")
    assert within >= SHARE, f"{within:.1%} of word starts within {WITHIN} s: {sorted(found)}"
