"""The Whisper engine's languages on the real multilingual base model (the `multilingual` extra,
installed by make test), on a few seconds of espeak-ng speech: detection from speech behind a
silent lead, among the options (a poor pick reported with its low probability), a silent chunk
left undecided, segment scope on a file that switches language, and the English translation of
each segment."""

from __future__ import annotations

import threading
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from structlog.testing import capture_logs

from bench.languages import LANGUAGES
from recall.engines.base import TranscribeRequest
from recall.engines.languages import LOW_PROBABILITY
from recall.engines.prompt import REPETITIVE, compression_ratio
from recall.engines.whisper import WhisperEngine
from recall.media.types import Chunk
from recall.resources import TranscriptionJob
from recall_dev import speech

pytestmark = pytest.mark.slow
RATE = 16_000


@pytest.fixture(scope="module")
def engine() -> WhisperEngine:
    return WhisperEngine(model="base", threads=2)


def audio_of(tmp: Path, said: list[tuple[str, int]], lead: float = 0.0) -> tuple[Any, list[Any]]:
    path = tmp / "said.wav"
    spans = speech.synthesize_voices([(lang, LANGUAGES[lang][i]) for lang, i in said], path)
    with wave.open(str(path)) as w:
        samples = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768
    silence = np.zeros(int(lead * RATE), np.float32)
    return np.concatenate([silence, samples]), [(a + lead, b + lead) for a, b in spans]


def job(**spec: Any) -> TranscriptionJob:
    body = {"source": {"url": "file:///x.wav"}, "engine": {"name": "whisper", "model": "base"}}
    return TranscriptionJob.from_api(
        {"metadata": {"name": "x", "namespace": "ns"}, "spec": {**body, **spec}}
    )


def request(audio: Any, j: TranscriptionJob, language: str | None = None) -> TranscribeRequest:
    chunk = Chunk(0, 0.0, len(audio) / RATE, audio)
    return TranscribeRequest.of(chunk, job=j, cancel=threading.Event(), language=language)


def test_detect__from_the_speech_behind_a_silent_lead_among_the_options(
    engine: WhisperEngine, tmp_path: Path
) -> None:
    audio, _ = audio_of(tmp_path, [("de", 1)], lead=20.0)  # 20 s of silence, then German
    found = engine.detect_language(request(audio, job(language="auto")))
    assert found is not None and found.language == "de"
    assert found.probability is not None and found.probability > LOW_PROBABILITY
    among = engine.detect_language(request(audio, job(languageOptions=["es", "it"])))
    assert among is not None and among.language in ("es", "it")
    assert among.probability is not None and among.probability < LOW_PROBABILITY
    silent = np.zeros(10 * RATE, np.float32)
    assert engine.detect_language(request(silent, job(language="auto"))) is None


def test_segment_scope__each_segment_in_its_language_with_its_translation(
    engine: WhisperEngine, tmp_path: Path
) -> None:
    audio, spans = audio_of(tmp_path, [("de", 1), ("es", 3)])
    j = job(
        language="auto",
        languageScope="segment",
        languageOptions=["de", "es", "it", "en"],
        transcript={"translate": "en"},
    )
    segments = engine.transcribe(request(audio, j, "de"))
    assert segments
    for language, (a, b) in zip(["de", "es"], spans, strict=True):
        inside = [s for s in segments if s.start < b and s.end > a]
        assert inside and all(s.language == language for s in inside), segments
    english = " ".join(s.translation or "" for s in segments).lower()
    assert "family" in english or "bread" in english or "library" in english, english


def test_translation__english_that_repeats_itself_is_translated_again(
    engine: WhisperEngine, tmp_path: Path
) -> None:
    # The window's batched translation of these two German sentences is one phrase over and
    # over; translated again one at a time (the temperature fallback) it says the sentences.
    audio, _ = audio_of(tmp_path, [("de", 0), ("de", 1)])
    j = job(language="de", transcript={"translate": "en"})
    with capture_logs() as logs:
        segments = engine.transcribe(request(audio, j, "de"))
    english = " ".join(s.translation or "" for s in segments)
    assert compression_ratio(english) <= REPETITIVE, english
    found = {"new", "morning", "family", "bread", "grandmother", "budget", "council"}
    assert found & set(english.lower().replace(".", " ").replace(",", " ").split()), english
    again = [e for e in logs if e.get("reason") == "repetitive_translation"]
    assert again, logs  # the batched English did repeat itself: the case this test is for
