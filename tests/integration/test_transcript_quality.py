"""What a transcript is worth, measured with the bundled tiny.en on speech whose truth is known.

- Word timing: four passages of 77 words synthesized one by one with espeak-ng and joined
  with random silences (0.12-0.6 s), so each word's true start is known to the sample
  (`recall_dev.timed_speech`). Each is transcribed chunk by chunk as a worker does, all but
  the first chunk from a resume (a new media seeking to the checkpointed cut, as a second
  attempt would): word times are absolute, in order, inside their segments, and 90 % of the
  words the model got right (a word error rate's alignment) start within 0.25 s of the truth.
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

from recall.engines.whisper import WhisperEngine
from recall.resources import TranscriptionJob
from recall_dev import speech, timed_speech

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
                    chunk, language="en", cancel=threading.Event(), job=job, attempt=1
                )
                text += [s.text for s in found]
        rates[name] = timed_speech.name_errors(" ".join(text))
    record_property("name_error_rate_without_vocabulary", round(rates["without"], 3))
    record_property("name_error_rate_with_vocabulary", round(rates["with"], 3))
    print(f"\nname error rate: {rates['without']:.0%} without, {rates['with']:.0%} with vocabulary")
    assert rates["with"] <= rates["without"] / 2, rates
    assert rates["with"] <= 0.4, rates
