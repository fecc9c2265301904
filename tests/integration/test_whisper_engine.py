"""The local Whisper engine end to end: synthesized English speech in, the same words out.

Four known sentences are spoken by `espeak-ng` into one ~38 s WAV (two 30 s chunks), which
goes through `WhisperEngine.load_media`, the lazily decoded chunks, and `transcribe` for every
chunk with the bundled tiny.en model, exactly as a worker calls them; a second test encodes
it three times over as MP3 and resumes half-way, as a second attempt would. The word error
rate must stay within 25 %.
`espeak-ng` is a required system package (hack/install-system-deps.sh): without it these
tests fail rather than skip. No cluster is needed.
"""

from __future__ import annotations

import threading
import time
import wave
from collections.abc import Callable
from pathlib import Path

import jiwer
import numpy as np
import pytest

from recall.engines.base import TranscribeRequest
from recall.engines.whisper import WhisperEngine
from recall.media.types import Chunk, Segment
from recall.resources import TranscriptionJob
from recall.resources.errors import JobFailure
from recall_dev import speech as synth
from tests.audio import encode

pytestmark = pytest.mark.slow

SENTENCES = synth.SENTENCES[:4]
MAX_WER = 0.25
normalise = synth.normalise


def synthesize(sentences: list[str], out: Path) -> float:
    try:
        return synth.synthesize(sentences, out)
    except synth.SpeechUnavailable as e:
        pytest.fail(str(e))


def job_for(url: str, language: str | None = "en") -> TranscriptionJob:
    spec: dict[str, object] = {"source": {"url": url}}
    if language:
        spec["language"] = language
    return TranscriptionJob.from_api({"metadata": {"name": "speech"}, "spec": spec})


def silent_second() -> Chunk:
    """A chunk of one second of silence, made afresh."""
    return Chunk(0, 0.0, 1.0, np.zeros(16_000, np.float32))


def one_second(engine: WhisperEngine, job: TranscriptionJob, language: str) -> list[Segment]:
    """`engine`'s transcript of one second of silence for `job` in `language`, attempt 1, as
    a worker asks for a chunk."""
    return engine.transcribe(
        TranscribeRequest.of(
            silent_second(), language=language, cancel=threading.Event(), job=job, attempt=1
        )
    )


@pytest.fixture(scope="module")
def speech(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    out = tmp_path_factory.mktemp("speech") / "speech.wav"
    return out, synthesize(SENTENCES, out)


@pytest.fixture(scope="module")
def engine() -> WhisperEngine:
    return WhisperEngine()


def test_transcribe__synthesized_speech_within_word_error_rate(
    speech: tuple[Path, float],
    engine: WhisperEngine,
    record_property: Callable[[str, object], None],
) -> None:
    path, seconds = speech
    job = job_for(path.as_uri())
    with engine.load_media(job) as media:
        assert media.duration == pytest.approx(seconds, abs=0.05)  # the container's estimate
        chunks = list(media.chunks())
    assert len(chunks) == 2
    assert media.duration == pytest.approx(seconds, abs=0.05)  # decoded

    one_second(engine, job, "en")  # load the model first
    wall, cpu = time.perf_counter(), time.process_time()
    transcript: list[Segment] = []
    for chunk in chunks:
        segments = engine.transcribe(
            TranscribeRequest.of(
                chunk, language=job.spec.language, cancel=threading.Event(), job=job, attempt=1
            )
        )
        assert segments, f"chunk {chunk.index} produced no text"
        for s in segments:
            assert 0.0 <= s.start <= s.end <= chunk.duration
        transcript += [
            s.model_copy(update={"start": s.start + chunk.start, "end": s.end + chunk.start})
            for s in segments
        ]
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu

    starts = [s.start for s in transcript]
    assert starts == sorted(starts)
    hypothesis = normalise(" ".join(s.text for s in transcript))
    reference = normalise(" ".join(SENTENCES))
    wer = jiwer.wer(reference, hypothesis)
    rtf_wall, rtf_cpu = media.duration / wall, media.duration / cpu
    record_property("wer", round(wer, 3))
    record_property("audio_seconds_per_wall_second", round(rtf_wall, 1))
    record_property("audio_seconds_per_cpu_second", round(rtf_cpu, 1))
    print(
        f"\nwhisper/tiny.en: {media.duration:.1f} s audio, wall {wall:.2f} s, cpu {cpu:.2f} s, "
        f"{rtf_wall:.1f}x real time (wall), {rtf_cpu:.1f}x (cpu), WER {wer:.3f}\n"
        f"hypothesis: {hypothesis}"
    )
    assert wer <= MAX_WER, f"WER {wer:.2f} > {MAX_WER}: {hypothesis!r}"
    assert rtf_wall > 1.0, "slower than real time"


def test_transcribe__compressed_speech_resumed_half_way_within_word_error_rate(
    speech: tuple[Path, float], engine: WhisperEngine, tmp_path: Path
) -> None:
    """Three times the speech as MP3; the first half transcribed, then the rest from a resume
    (a new media, seeking to the checkpointed cut) as a second attempt would."""
    path = encode_mp3(speech[0], tmp_path / "talk.mp3", repeat=3)
    job = job_for(path.as_uri())
    words: list[str] = []
    with engine.load_media(job) as media:
        first = []
        for chunk in media.chunks():
            first.append(chunk)
            words += transcribed(engine, job, chunk)
            if len(first) == 2:
                break
    with engine.load_media(job) as media:
        rest = list(media.chunks(first[-1].resume()))
        assert media.resumed_by == "seek"
    assert rest[0].first == first[-1].end and rest[0].index == 2
    assert rest[-1].last
    for chunk in rest:
        words += transcribed(engine, job, chunk)
    wer = jiwer.wer(normalise(" ".join(SENTENCES * 3)), normalise(" ".join(words)))
    assert wer <= MAX_WER, f"WER {wer:.2f}: {' '.join(words)!r}"


def transcribed(engine: WhisperEngine, job: TranscriptionJob, chunk: Chunk) -> list[str]:
    segments = engine.transcribe(
        TranscribeRequest.of(chunk, language="en", cancel=threading.Event(), job=job, attempt=1)
    )
    return [s.text for s in segments]


def encode_mp3(wav: Path, out: Path, *, repeat: int) -> Path:
    """`wav` played `repeat` times, encoded as mono MP3 at its own rate."""
    with wave.open(str(wav)) as w:
        rate = w.getframerate()
        pcm = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768
    return encode(out, np.tile(pcm, repeat), rate, "libmp3lame", 1152)


def test_label__names_the_bundled_model(engine: WhisperEngine) -> None:
    assert engine.label() == "whisper/tiny.en"


def test_transcribe__silence_gives_no_segments(engine: WhisperEngine) -> None:
    silent = Chunk(0, 0.0, 10.0, np.zeros(160_000, np.float32))
    assert (
        engine.transcribe(
            TranscribeRequest.of(
                silent,
                language=None,
                cancel=threading.Event(),
                job=job_for("file:///x.wav", None),
                attempt=1,
            )
        )
        == []
    )


def test_transcribe__cancelled_before_start_returns_nothing(
    speech: tuple[Path, float], engine: WhisperEngine
) -> None:
    job = job_for(speech[0].as_uri())
    with engine.load_media(job) as media:
        chunk = next(media.chunks())
    cancel = threading.Event()
    cancel.set()
    assert (
        engine.transcribe(
            TranscribeRequest.of(chunk, language="en", cancel=cancel, job=job, attempt=1)
        )
        == []
    )


def test_transcribe__language_the_model_lacks_is_permanent(engine: WhisperEngine) -> None:
    with pytest.raises(JobFailure) as info:
        one_second(engine, job_for("file:///x.wav", "fr-FR"), "fr-FR")
    assert (info.value.reason, info.value.permanent) == ("UnsupportedLanguage", True)
    assert "English-only" in info.value.message


def test_model__unloadable_directory_is_permanent(tmp_path: Path) -> None:
    """A directory that holds no Whisper model fails the job at its first chunk, for good: no
    other worker would do better with the same files."""
    broken = tmp_path / "not-a-model"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    engine = WhisperEngine(model=str(broken))
    assert engine.label() == "whisper/not-a-model"
    with pytest.raises(JobFailure) as info:
        one_second(engine, job_for("file:///x.wav"), "en")
    assert (info.value.reason, info.value.permanent) == ("ModelInvalid", True)
    assert str(broken) in info.value.message


def test_model__a_name_that_is_not_bundled_is_not_downloaded() -> None:
    engine = WhisperEngine(model="large-v3")
    with pytest.raises(JobFailure) as info:
        one_second(engine, job_for("file:///x.wav"), "en")
    assert (info.value.reason, info.value.permanent) == ("ModelNotFound", True)
    assert "large-v3" in info.value.message and "internet" in info.value.message


def test_language__auto_on_an_english_only_model_names_the_model(engine: WhisperEngine) -> None:
    job = job_for("file:///x.wav", "auto")
    for call in (
        lambda: engine.detect_language(
            TranscribeRequest.of(silent_second(), job=job, cancel=threading.Event())
        ),
        lambda: one_second(engine, job, "auto"),
    ):
        with pytest.raises(JobFailure) as info:
            call()
        assert (info.value.reason, info.value.permanent) == ("LanguageDetectionUnsupported", True)
        assert "tiny.en" in info.value.message and "English-only" in info.value.message


def test_language__empty_on_an_english_only_model_is_english(engine: WhisperEngine) -> None:
    found = engine.detect_language(
        TranscribeRequest.of(
            silent_second(), job=job_for("file:///x.wav", None), cancel=threading.Event()
        )
    )
    # the model's own language, not detected: no probability is recorded
    assert found is not None and (found.language, found.probability) == ("en", None)


def test_slots__one_model_replica_per_slot_so_their_calls_run_side_by_side(
    speech: tuple[Path, float],
) -> None:
    from recall.base.settings import WorkerSettings
    from recall.engines.whisper import load_model

    engine = WhisperEngine.from_settings(WorkerSettings(id="w", slots=2))
    job = job_for(speech[0].as_uri())
    with engine.load_media(job) as media:
        chunk = next(media.chunks())
    said: list[list[Segment]] = []
    calls = [
        threading.Thread(
            target=lambda: said.append(
                engine.transcribe(
                    TranscribeRequest.of(
                        chunk, language="en", cancel=threading.Event(), job=job, attempt=1
                    )
                )
            )
        )
        for _ in range(2)
    ]
    for t in calls:
        t.start()
    for t in calls:
        t.join(120)
    assert len(said) == 2 and said[0] == said[1] != []
    local = engine.local_model(job)
    model = load_model(str(local.path), engine.threads, engine.placement, engine.streams)
    assert model.model.num_workers == 2  # CTranslate2 runs two calls at once
    # A worker of one slot has one replica (and all the threads for it).
    single = WhisperEngine()
    one = load_model(str(local.path), single.threads, single.placement, single.streams)
    assert one.model.num_workers == 1
