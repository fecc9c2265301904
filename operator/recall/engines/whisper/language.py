"""Languages on the Whisper model: what a job may ask of it, the language of speech among the
allowed ones, and the English translation of a window.

Contract:
- `require(model, label, job)`: a job that asks of an English-only model what only a
  multilingual one does fails permanently before anything is decoded, naming the model
  (`recall.engines.languages.english_only`). An empty language on an English-only model is
  English, not detected.
- `detect(model, audio, options)`: the language of the speech in `audio` (`speech`: never a
  silent window), the most likely among `options` (any of the model's languages when none),
  with the model's own probability (`recall.engines.languages.choose`); None when `audio` holds
  no speech. Options the model does not know are left out (`yue` before large-v3); none known
  fails the job with `UnsupportedLanguage`. `decide(model, said, options)` is the same on audio
  that is speech already (a segment-scope span, pauses kept: its speech is not looked for again).
- `known(model)`: the languages a model knows, those its tokenizer has a language token for.
  faster-whisper's `supported_languages` lists all of large-v3's for any multilingual model,
  and decoding in a language without a token decodes in none (base on `yue`: garbage).
- `attach(segments, words)`: a window's translation given to its segments, each word to the
  segment its middle falls in (else the nearest), so each segment carries the English of its
  own speech and keeps its own times.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from recall.engines.base import Detected
from recall.engines.languages import choose, english_only, multilingual_asks
from recall.engines.whisper.vad import speech_timestamps
from recall.engines.whisper.windows import RATE, WINDOW_SECONDS
from recall.media.types import Segment
from recall.resources.errors import JobFailure

if TYPE_CHECKING:
    from recall.resources import TranscriptionJob


def require(model: Any, label: str, job: TranscriptionJob) -> None:
    """Refuse, permanently and naming the model, what an English-only model cannot do."""
    if model.model.is_multilingual:
        return
    spec, t = job.spec, job.spec.transcript
    asks = multilingual_asks(
        spec.language, spec.language_options or (), spec.language_scope, t.translate if t else None
    )
    failure = english_only(label, asks)
    if failure is not None:
        raise failure


def known(model: Any) -> frozenset[str]:
    """The languages `model` can decode in (see the module contract)."""
    if not model.model.is_multilingual:
        return frozenset(model.supported_languages)  # English: no tokenizer to ask
    token = model.hf_tokenizer.token_to_id
    return frozenset(c for c in model.supported_languages if token(f"<|{c}|>") is not None)


def speech(audio: Any) -> Any:
    """The speech in `audio` as faster-whisper's VAD-filtered `transcribe` gathers it before
    detecting: stretches by the VAD's default options (pauses under 2 s kept, 0.4 s padding),
    put together, at most one window. Surer than the decoding windows' stretches, cut at every
    160 ms pause (docs/languages.md)."""
    import numpy as np
    from faster_whisper.vad import VadOptions

    stretches = speech_timestamps(audio, VadOptions())
    if not stretches:
        return None
    joined = np.concatenate([audio[s["start"] : s["end"]] for s in stretches])
    return joined[: WINDOW_SECONDS * RATE]


def detect(model: Any, audio: Any, options: Sequence[str] | None) -> Detected | None:
    """The language of the speech in `audio` among `options` (see the module contract)."""
    if audio is None or len(audio) == 0:
        return None
    said = speech(audio)
    if said is None:
        return None
    return decide(model, said, options)


def decide(model: Any, said: Any, options: Sequence[str] | None) -> Detected:
    """The language of `said`, audio that is speech already, among `options` (the contract)."""
    languages = known(model)
    allowed = [o for o in options or () if o in languages]
    if options and not allowed:
        raise JobFailure(
            "UnsupportedLanguage",
            f"the model knows none of spec.languageOptions {list(options)}",
            permanent=True,
        )
    _language, _probability, probabilities = model.detect_language(audio=said)
    language, probability = choose(probabilities, allowed)
    return Detected(language, probability)


def attach(segments: list[Segment], words: list[tuple[float, float, str]]) -> list[Segment]:
    """`segments` (one window's) each given its translated words (see the module contract)."""
    if not segments:
        return segments
    given: list[list[str]] = [[] for _ in segments]
    for start, end, word in words:
        middle = (start + end) / 2
        best = min(
            range(len(segments)),
            key=lambda i: max(segments[i].start - middle, middle - segments[i].end, 0.0),
        )
        given[best].append(word)
    return [
        s.model_copy(update={"translation": "".join(mine).strip() or None})
        for s, mine in zip(segments, given, strict=True)
    ]
