"""The languages a Whisper model knows are those its tokenizer has a language token for:
faster-whisper lists large-v3's (`yue`) for every multilingual model. A stand-in base model:
its tokenizer has no `<|yue|>`."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from recall.engines.base import TranscribeRequest
from recall.engines.languages import WHISPER_LANGUAGES
from recall.engines.whisper import WhisperEngine, language
from recall.media.types import Chunk
from recall.resources import TranscriptionJob
from recall.resources.errors import JobFailure


def base_model() -> Any:
    """faster-whisper's base as it answers: every language listed, `yue` without a token."""
    return SimpleNamespace(
        model=SimpleNamespace(is_multilingual=True),
        supported_languages=list(WHISPER_LANGUAGES),
        hf_tokenizer=SimpleNamespace(token_to_id=lambda t: None if t == "<|yue|>" else 7),
        detect_language=lambda audio: ("de", 0.9, [("de", 0.9), ("it", 0.05), ("es", 0.01)]),
    )


def request(**spec: Any) -> TranscribeRequest:
    body = {"source": {"url": "file:///x.wav"}, **spec}
    job = TranscriptionJob.from_api({"metadata": {"name": "x"}, "spec": body})
    chunk = Chunk(0, 0.0, 1.0, np.zeros(16_000, np.float32))
    return TranscribeRequest.of(
        chunk, job=job, cancel=threading.Event(), language=spec.get("language")
    )


def test_known__the_languages_the_tokenizer_has_a_token_for() -> None:
    found = language.known(base_model())
    assert (
        "yue" not in found
        and {"de", "haw", "en"} <= found
        and len(found) == len(WHISPER_LANGUAGES) - 1
    )
    english = SimpleNamespace(
        model=SimpleNamespace(is_multilingual=False), supported_languages=["en"]
    )
    assert language.known(english) == {"en"}


def test_decide__options_the_model_has_no_token_for_are_left_out() -> None:
    said = np.zeros(16_000, np.float32)
    with pytest.raises(JobFailure) as info:
        language.decide(base_model(), said, ["yue"])
    assert (info.value.reason, info.value.permanent) == ("UnsupportedLanguage", True)
    found = language.decide(base_model(), said, ["yue", "it"])
    assert (found.language, found.probability) == ("it", 0.05)


def test_language_for__a_language_without_a_token_fails_permanently() -> None:
    engine = WhisperEngine(threads=1)
    with pytest.raises(JobFailure) as info:
        engine._language_for(base_model(), "base", request(language="yue"))
    assert (info.value.reason, info.value.permanent) == ("UnsupportedLanguage", True)
    assert "yue" in info.value.message
    assert engine._language_for(base_model(), "base", request(language="de-DE")) == "de"
