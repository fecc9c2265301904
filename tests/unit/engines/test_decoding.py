"""How the Whisper engine calls faster-whisper, over a stand-in pipeline (no model): one chunk a
call is a batch of one, each window of speech is decoded once, `cancel` is honoured between
windows, words are aligned always but kept only when the job asks, and a prompted window that
leaves speech without words is decoded again without the prompt."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np
import pytest

from recall.engines.base import TranscribeRequest
from recall.engines.whisper import WhisperEngine, windows
from recall.engines.whisper.decode import WHISPER_CONTEXT_CHARACTERS
from recall.engines.whisper.windows import RATE, unreached
from recall.media.types import Chunk
from recall.resources import TranscriptionJob


class Pipeline:
    """faster-whisper's `BatchedInferencePipeline` as the engine uses it: one segment per
    clip, decoded lazily `batch_size` clips a step, each step counted."""

    calls: ClassVar[list[dict[str, Any]]] = []
    steps: ClassVar[int] = 0
    skips: ClassVar[float] = 0.0  # seconds a prompted window's words skip at its start
    fill: ClassVar[bool] = False  # the last word lasts to the window's end

    def __init__(self, model: Any) -> None:
        del model

    def transcribe(self, audio: Any, **options: Any) -> tuple[Iterator[Any], None]:
        Pipeline.calls.append(options)
        clips = options["clip_timestamps"]
        size = options["batch_size"]

        def segments() -> Iterator[Any]:
            for i in range(0, len(clips), size):
                Pipeline.steps += 1
                for clip in clips[i : i + size]:
                    start = clip["start"] + (Pipeline.skips if options["initial_prompt"] else 0)
                    last = clip["end"] if Pipeline.fill else start + 1.0
                    yield SimpleNamespace(
                        text=" Hello there.",
                        start=start,
                        end=last,
                        avg_logprob=-0.2,
                        no_speech_prob=0.01,
                        words=[
                            SimpleNamespace(
                                word=" Hello", start=start, end=start + 0.5, probability=0.9
                            ),
                            SimpleNamespace(
                                word=" there.", start=start + 0.5, end=last, probability=0.8
                            ),
                        ],
                    )

        return segments(), None


@pytest.fixture
def pipeline(monkeypatch: pytest.MonkeyPatch) -> type[Pipeline]:
    import faster_whisper

    Pipeline.calls, Pipeline.steps, Pipeline.skips, Pipeline.fill = [], 0, 0.0, False
    monkeypatch.setattr(faster_whisper, "BatchedInferencePipeline", Pipeline)
    return Pipeline


def engine_of(batch_size: int = 1) -> WhisperEngine:
    """An engine without the VAD (its windows are the chunk's 30 s slices) and a stand-in
    English-only model."""
    engine = WhisperEngine(vad_filter=False, batch_size=batch_size, threads=1)
    model = SimpleNamespace(
        model=SimpleNamespace(is_multilingual=False), supported_languages=["en"]
    )
    engine._loaded = lambda job, cancel: (model, "tiny.en")  # type: ignore[method-assign]
    return engine


def job_of(words: bool) -> TranscriptionJob:
    spec = {"source": {"url": "file:///x.wav"}, "language": "en", "transcript": {"words": words}}
    return TranscriptionJob.from_api({"metadata": {"name": "x"}, "spec": spec})


def chunk_of(seconds: float) -> Chunk:
    """A chunk of silence: without the VAD it is decoded all the same, and with no stretch
    of sound the words keep the times the stand-in gives them."""
    return Chunk(0, 0.0, seconds, np.zeros(int(seconds * RATE), np.float32))


def test_transcribe__a_batch_of_one_each_window_decoded_once(pipeline: type[Pipeline]) -> None:
    engine = engine_of()
    cancel = threading.Event()
    segments = engine.transcribe(
        TranscribeRequest.of(
            chunk_of(70),
            language="en",
            cancel=cancel,
            job=job_of(True),
            attempt=1,
            context="Before.",
        )
    )
    (call,) = pipeline.calls
    assert len(call["clip_timestamps"]) == 3  # 30 + 30 + 10 s: three windows, no more
    assert pipeline.steps == 3  # a batch of one window a step
    assert call["batch_size"] == 1 and call["without_timestamps"] and call["word_timestamps"]
    assert call["initial_prompt"] == "Before." and call["language"] == "en"
    assert [s.text for s in segments] == ["Hello there."] * 3
    assert [s.start for s in segments] == pytest.approx([0.0, 30.0, 60.0], abs=0.011)
    assert all(s.words and len(s.words) == 2 for s in segments)
    assert all(s.confidence is not None and 0 < s.confidence <= 1 for s in segments)


def test_transcribe__words_aligned_but_not_kept_unless_asked(pipeline: type[Pipeline]) -> None:
    segments = engine_of().transcribe(
        TranscribeRequest.of(
            chunk_of(20), language="en", cancel=threading.Event(), job=job_of(False), attempt=1
        )
    )
    assert pipeline.calls[0]["word_timestamps"]  # segments are cut at the words
    assert [s.text for s in segments] == ["Hello there."] and segments[0].words is None


def test_transcribe__the_same_segments_as_a_batch_of_that_one_chunk(
    pipeline: type[Pipeline],
) -> None:
    engine, job, chunk = engine_of(), job_of(True), chunk_of(45)
    one = engine.transcribe(
        TranscribeRequest.of(chunk, language="en", cancel=threading.Event(), job=job, attempt=1)
    )
    (batch,) = engine.transcribe_batch(
        TranscribeRequest.of([chunk], language="en", cancel=threading.Event(), job=job, attempt=1)
    )
    assert one == batch and len(one) == 2


def test_transcribe__cancel_stops_before_the_next_window(pipeline: type[Pipeline]) -> None:
    engine, cancel = engine_of(), threading.Event()
    original = Pipeline.transcribe

    def cancelled_after_the_first(self: Pipeline, audio: Any, **options: Any) -> Any:
        segments, info = original(self, audio, **options)

        def then_cancel() -> Iterator[Any]:
            for s in segments:
                cancel.set()  # the lease is lost while the first window is decoded
                yield s

        return then_cancel(), info

    Pipeline.transcribe = cancelled_after_the_first  # type: ignore[method-assign]
    try:
        found = engine.transcribe(
            TranscribeRequest.of(
                chunk_of(90), language="en", cancel=cancel, job=job_of(True), attempt=1
            )
        )
    finally:
        Pipeline.transcribe = original  # type: ignore[method-assign]
    assert found == [] and pipeline.steps == 1  # the second and third windows never decoded


def test_transcribe__a_silent_window_gives_nothing(
    pipeline: type[Pipeline], monkeypatch: pytest.MonkeyPatch
) -> None:
    original = Pipeline.transcribe

    def silent(self: Pipeline, audio: Any, **options: Any) -> Any:
        segments, info = original(self, audio, **options)
        return (
            (
                SimpleNamespace(**{**vars(s), "no_speech_prob": 0.9, "avg_logprob": -1.5})
                for s in segments
            ),
            info,
        )

    monkeypatch.setattr(Pipeline, "transcribe", silent)
    found = engine_of().transcribe(
        TranscribeRequest.of(
            chunk_of(30), language="en", cancel=threading.Event(), job=job_of(True), attempt=1
        )
    )
    assert found == []


def test_transcribe__cancelled_before_the_call_costs_no_model(pipeline: type[Pipeline]) -> None:
    cancel = threading.Event()
    cancel.set()
    found = engine_of().transcribe(
        TranscribeRequest.of(
            chunk_of(30), language="en", cancel=cancel, job=job_of(True), attempt=1
        )
    )
    assert found == [] and pipeline.calls == []


def test_unreached__speech_farther_than_the_reach_from_every_word() -> None:
    speech = [(0.0, 4.0), (6.0, 8.0)]
    assert unreached(speech, [(0.2, 1.0), (1.5, 3.8), (6.1, 7.9)]) == 0.0
    assert unreached(speech, [(3.0, 3.8), (6.1, 7.9)]) == pytest.approx(2.5)  # 0 to 2.5 s
    assert unreached(speech, []) == pytest.approx(6.0)
    assert unreached([], [(1.0, 2.0)]) == 0.0


def test_transcribe__a_prompted_window_that_skips_speech_is_decoded_again_without_it(
    pipeline: type[Pipeline], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stand-in writes a prompted window's words from 3 s in (tiny.en skipped 19 s of a
    recording that repeats the text of its prompt); decoded again without the prompt, the
    window's words start at its speech."""
    spoken = windows.Stretches([(RATE, 5 * RATE)], [(RATE, 5 * RATE)])
    monkeypatch.setattr(windows, "stretches_of_each", lambda audios: [spoken] * len(audios))
    engine, job = engine_of(), job_of(True)
    engine.vad_filter = True
    pipeline.skips, pipeline.fill = 3.0, True
    context = (
        "And Mr. John Dashwood had then leisure to consider how much there might be prudently "
        "in his power to do for them. He was not an ill-disposed young man, unless to be "
        "rather cold-hearted and rather selfish is to be ill-disposed."
    )
    prompted = TranscribeRequest.of(
        chunk_of(30),
        language="en",
        cancel=threading.Event(),
        job=job,
        attempt=1,
        context=context,
    )
    found = engine.transcribe(prompted)
    first, again = pipeline.calls
    assert len(first["initial_prompt"]) <= WHISPER_CONTEXT_CHARACTERS
    assert again["initial_prompt"] is None and len(again["clip_timestamps"]) == 1
    assert [s.start for s in found] == pytest.approx([1.0], abs=0.011)  # the window's start
    # Without a prompt there is nothing to decode again without: one call.
    pipeline.calls.clear()
    engine.transcribe(replace(prompted, context=""))
    assert len(pipeline.calls) == 1
    # A prompted window whose words reach its speech is decoded once.
    pipeline.calls.clear()
    pipeline.skips = 0.0
    engine.transcribe(prompted)
    assert len(pipeline.calls) == 1


class Translator:
    """faster-whisper's `WhisperModel.transcribe` for the translate task: two segments of
    English, the first with its words aligned, the second without; each call recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, dict[str, Any]]] = []

    def transcribe(self, audio: Any, **options: Any) -> tuple[Iterator[Any], None]:
        self.calls.append((audio, options))
        words = [
            SimpleNamespace(word=" The", start=0.5, end=0.75),
            SimpleNamespace(word=" bread.", start=0.75, end=1.25),
        ]
        first = SimpleNamespace(text=" The bread.", start=0.5, end=1.25, words=words)
        second = SimpleNamespace(text=" For the family.", start=2.0, end=3.0, words=None)
        return iter([first, second]), None


def test_translation__english_that_repeats_itself_is_translated_again_alone_in_the_chunk() -> None:
    from recall.engines.whisper.decode import Decoding, translation
    from recall.engines.whisper.windows import Window

    model = Translator()
    d = Decoding(model=model, language="de", context="", hotwords=None, task="translate")
    chunk = Chunk(3, 90.0, 30.0, np.arange(30 * RATE, dtype=np.float32))
    window = Window(chunk=0, first=4 * RATE, end=12 * RATE, at=RATE)
    again = SimpleNamespace(text=" I have been waiting for you." * 5, words=[])
    words = translation(d, chunk, window, again, threading.Event())
    ((audio, options),) = model.calls
    assert np.array_equal(audio, chunk.audio[4 * RATE : 12 * RATE])  # the window's audio alone
    assert options["task"] == "translate" and options["language"] == "de"
    assert options["condition_on_previous_text"] is False and options["word_timestamps"]
    # Timed in the chunk: the window starts 4 s into it; a segment without words is one text.
    assert words == [(4.5, 4.75, " The"), (4.75, 5.25, " bread."), (6.0, 7.0, " For the family.")]
    # A cancelled call stops after the segment in hand.
    cancel = threading.Event()
    cancel.set()
    assert translation(d, chunk, window, again, cancel) == [
        (4.5, 4.75, " The"),
        (4.75, 5.25, " bread."),
    ]
    # English that does not repeat itself is taken as the batched task gave it.
    model.calls.clear()
    fine = SimpleNamespace(
        text=" The bread.", words=[SimpleNamespace(word=" The", start=0.0, end=0.5)]
    )
    assert translation(d, chunk, window, fine, threading.Event()) == [(3.0, 3.5, " The")]
    assert model.calls == []
