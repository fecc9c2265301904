"""Local Whisper's window decoding on real read speech: the bundled tiny.en over the LibriVox
clips (`recall_dev.librivox`), a batch of chunks in one `transcribe_batch` call against
faster-whisper's own one-at-a-time decoding of the same chunks, and one chunk a call
(`transcribe`, a batch of one) decoding each chunk's speech in one window. And
`recall worker --device cuda` on this machine, which has no GPU. No cluster is needed.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import jiwer
import numpy as np
import pytest

from recall.engines.base import TranscribeRequest
from recall.engines.whisper import WhisperEngine, load_model
from recall.engines.whisper.windows import RATE
from recall.media.types import Chunk, Segment
from recall.resources import TranscriptionJob
from recall_dev import speech
from tests.audio import librivox_twice
from tests.helpers import run_captured

pytestmark = pytest.mark.slow

normalise = speech.normalise


def job_for(path: Path, *, chunk_seconds: int, words: bool = True) -> TranscriptionJob:
    spec: dict[str, object] = {
        "source": {"url": path.as_uri()},
        "language": "en",
        "engine": {"chunkSeconds": chunk_seconds},
    }
    if words:
        spec["transcript"] = {"words": True}
    return TranscriptionJob.from_api({"metadata": {"name": "librivox"}, "spec": spec})


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return librivox_twice(tmp_path_factory)


@pytest.fixture(scope="module")
def engine() -> WhisperEngine:
    return WhisperEngine(batch_size=4)


def chunks_of(engine: WhisperEngine, job: TranscriptionJob) -> list[Chunk]:
    with engine.load_media(job) as media:
        return list(media.chunks())


def batched(
    engine: WhisperEngine, job: TranscriptionJob, chunks: list[Chunk]
) -> list[list[Segment]]:
    out: list[list[Segment]] = []
    for i in range(0, len(chunks), engine.batch_size):
        group = chunks[i : i + engine.batch_size]
        found = engine.transcribe_batch(
            TranscribeRequest.of(group, language="en", cancel=threading.Event(), job=job, attempt=1)
        )
        assert len(found) == len(group)
        out += found
    return out


def text_of(per_chunk: list[list[Segment]]) -> str:
    return " ".join(s.text for segments in per_chunk for s in segments)


def assert_inside_their_chunks(chunks: list[Chunk], per_chunk: list[list[Segment]]) -> None:
    for chunk, segments in zip(chunks, per_chunk, strict=True):
        floor = 0.0
        for s in segments:
            assert 0.0 <= s.start <= s.end <= chunk.duration + 1e-6, (chunk.index, s)
            assert s.start >= floor - 1e-6, f"chunk {chunk.index}: segments out of order"
            assert s.words, f"chunk {chunk.index}: words asked for, none given: {s}"
            for w in s.words:
                assert s.start - 1e-6 <= w.start <= w.end <= s.end + 1e-6, (s, w)
            assert [w.start for w in s.words] == sorted(w.start for w in s.words)
            assert s.confidence is not None and 0 < s.confidence <= 1
            floor = s.end


def one_at_a_time(engine: WhisperEngine, job: TranscriptionJob, chunk: Chunk) -> list[str]:
    """faster-whisper's own decoding of `chunk` (`WhisperModel.transcribe`), with the engine's
    model and options: the texts of its segments."""
    local = engine.local_model(job)
    model = load_model(str(local.path), engine.threads, engine.placement, engine.streams)
    segments, _info = model.transcribe(
        chunk.audio,
        language="en",
        beam_size=engine.beam_size,
        vad_filter=True,
        condition_on_previous_text=False,
    )
    return [s.text for s in segments if s.text.strip()]


def test_transcribe_batch__the_words_of_one_at_a_time_each_chunk_its_own(
    engine: WhisperEngine, recording: tuple[Path, str]
) -> None:
    path, said = recording
    job = job_for(path, chunk_seconds=10)
    chunks = chunks_of(engine, job)
    assert len(chunks) >= 6  # two batches of 4 and fewer
    one = [
        [Segment(start=0.0, end=0.0, text=t) for t in one_at_a_time(engine, job, c)] for c in chunks
    ]
    many = batched(engine, job, chunks)
    assert_inside_their_chunks(chunks, many)
    # Each chunk's own text, not a neighbour's: chunk by chunk against one at a time.
    for k, (a, b) in enumerate(zip(one, many, strict=True)):
        a_text, b_text = (
            normalise(" ".join(s.text for s in a)),
            normalise(" ".join(s.text for s in b)),
        )
        if a_text:
            assert jiwer.wer(a_text, b_text) <= 0.25, f"chunk {k}: {a_text!r} / {b_text!r}"
    same = jiwer.wer(normalise(text_of(one)), normalise(text_of(many)))
    assert same <= 0.05, f"{same:.3f} of the words differ: {text_of(many)}"
    assert jiwer.wer(normalise(said), normalise(text_of(many))) <= 0.1
    assert engine.device_of(job) == ("cpu", "int8_float32")


def test_transcribe__one_encoder_pass_per_chunk_of_speech_the_words_of_one_at_a_time(
    recording: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One chunk a call at the defaults (30 s chunks, `batch_size` 1): each chunk's speech is
    one window, encoded once, where faster-whisper's one-at-a-time decoding takes a second
    window for the end of most chunks; the words are the same."""
    from faster_whisper import WhisperModel

    path, said = recording
    engine = WhisperEngine()
    job = job_for(path, chunk_seconds=30)
    chunks = chunks_of(engine, job)
    assert len(chunks) == 2
    passes: list[int] = []
    encode = WhisperModel.encode

    def counted(model: WhisperModel, features: np.ndarray) -> object:
        passes.append(1 if features.ndim == 2 else features.shape[0])
        return encode(model, features)

    monkeypatch.setattr(WhisperModel, "encode", counted)
    context, ours = "", []
    for chunk in chunks:
        segments = engine.transcribe(
            TranscribeRequest.of(
                chunk, language="en", cancel=threading.Event(), job=job, attempt=1, context=context
            )
        )
        assert_inside_their_chunks([chunk], [segments])
        context = " ".join(s.text for s in segments) or context
        ours.append(segments)
    assert sum(passes) == len(chunks), passes  # one window a chunk
    theirs = " ".join(t for c in chunks for t in one_at_a_time(engine, job, c))
    changed = jiwer.wer(normalise(theirs), normalise(text_of(ours)))
    assert changed <= 0.05, f"{changed:.3f} of the words differ: {text_of(ours)}"
    assert jiwer.wer(normalise(said), normalise(text_of(ours))) <= 0.1


def test_transcribe_batch__a_chunk_longer_than_a_window_is_transcribed_to_its_end(
    engine: WhisperEngine, recording: tuple[Path, str]
) -> None:
    path, said = recording
    job = job_for(path, chunk_seconds=60)
    (chunk,) = chunks_of(engine, job)
    assert chunk.duration > 45  # two 30 s windows of the model
    (segments,) = engine.transcribe_batch(
        TranscribeRequest.of([chunk], language="en", cancel=threading.Event(), job=job, attempt=1)
    )
    assert_inside_their_chunks([chunk], [segments])
    assert segments[-1].end > chunk.duration - 6, "the second window's speech is missing"
    assert jiwer.wer(normalise(said), normalise(text_of([segments]))) <= 0.1


def test_transcribe_batch__a_silent_chunk_gets_nothing_and_its_neighbours_their_words(
    engine: WhisperEngine, recording: tuple[Path, str]
) -> None:
    path, _said = recording
    job = job_for(path, chunk_seconds=10, words=False)
    first, second = chunks_of(engine, job)[:2]
    silence = Chunk(1, first.end, first.end + 10.0, np.zeros(10 * RATE, np.float32))
    moved = Chunk(2, silence.end, silence.end + second.duration, second.audio)
    found = engine.transcribe_batch(
        TranscribeRequest.of(
            [first, silence, moved], language="en", cancel=threading.Event(), job=job, attempt=1
        )
    )
    assert [bool(f) for f in found] == [True, False, True]
    assert all(s.words is None for f in found for s in f)  # the job did not ask for words
    alone = engine.transcribe_batch(
        TranscribeRequest.of([second], language="en", cancel=threading.Event(), job=job, attempt=1)
    )
    assert [s.text for s in found[2]] == [s.text for s in alone[0]]
    assert [s.start for s in found[2]] == pytest.approx([s.start for s in alone[0]], abs=0.02)


def test_transcribe_batch__cancelled_before_the_call_returns_nothing(
    engine: WhisperEngine, recording: tuple[Path, str]
) -> None:
    path, _said = recording
    job = job_for(path, chunk_seconds=10)
    chunks = chunks_of(engine, job)[:2]
    cancel = threading.Event()
    cancel.set()
    assert (
        engine.transcribe_batch(
            TranscribeRequest.of(chunks, language="en", cancel=cancel, job=job, attempt=1)
        )
        == []
    )


def test_worker__device_cuda_without_a_gpu_refuses_to_start(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "RECALL_STORE_URL": (tmp_path / "store").as_uri(),
        "KUBECONFIG": str(tmp_path / "none"),  # refused before any API server is asked
        "HOME": str(tmp_path),
    }
    done = run_captured(
        [sys.executable, "-m", "recall", "worker", "--engine", "whisper", "--device", "cuda"],
        timeout=120,
        env=env,
    )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: device cuda: no CUDA device is visible")
    for what in ("nvidia.com/gpu", "NVIDIA device plugin", "CUDA image"):
        assert what in lines[0]
