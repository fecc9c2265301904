"""The language decisions of a multilingual model: the pick among the allowed languages, the
spans segment scope decides on (of stretches given, and of the VAD's on given probabilities),
and the majority. Pure."""

from __future__ import annotations

import numpy as np
import pytest

from recall.engines.languages import (
    LOW_PROBABILITY,
    SEGMENT_SPEECH_SECONDS,
    choose,
    decision_spans,
    majority,
)
from recall.engines.whisper import vad
from recall.engines.whisper.windows import stretches_of_each

RATE = 100  # samples per second, to keep the numbers readable
PROBS = [("th", 0.44), ("en", 0.11), ("fr", 0.077), ("de", 0.01)]


def test_choose__the_most_likely_language_or_the_most_likely_allowed_one() -> None:
    assert choose(PROBS, None) == ("th", 0.44)
    assert choose(PROBS, []) == ("th", 0.44)
    language, p = choose(PROBS, ["de", "fr"])
    assert (language, p) == ("fr", 0.077) and p < LOW_PROBABILITY  # not renormalized
    assert choose(PROBS, ["yue"]) == ("yue", 0.0)  # nothing listed for it


def test_decision_spans__a_language_is_decided_on_three_seconds_of_speech_at_least() -> None:
    # Sentences of 2 s with 0.2 s pauses inside them, 1 s between sentences.
    speech = [(0, 200), (220, 420), (520, 720), (740, 940), (1040, 1240)]
    spans = decision_spans(speech, RATE)
    # The last sentence alone has 2 s of speech, under the minimum: it joins the one before.
    assert spans == [(0, 420), (520, 1240)]
    assert all(
        sum((b - a) / RATE for a, b in speech if a >= s and b <= e) >= SEGMENT_SPEECH_SECONDS
        for s, e in spans
    )


def test_decision_spans__short_pauses_never_split_and_30_s_is_the_most() -> None:
    speech = [(i * 150, i * 150 + 140) for i in range(40)]  # 0.1 s pauses, 60 s in all
    spans = decision_spans(speech, RATE)
    assert all((e - s) / RATE <= 30 for s, e in spans) and len(spans) == 2
    assert decision_spans([], RATE) == []
    assert decision_spans([(0, 100)], RATE) == [(0, 100)]  # all the chunk has


def test_majority__by_seconds_of_speech() -> None:
    assert majority([("de", 4.0), ("fr", 3.0), ("fr", 2.0), (None, 9.0)]) == "fr"
    assert majority([(None, 1.0)]) is None


def test_decision_spans__a_half_second_pause_splits_measured_without_the_padding() -> None:
    """5.7 s of speech, a 0.5 s pause, 3.6 s: two spans. Padded by 0.4 s the two stretches
    meet halfway (no pause left), and the spans reach to the padded edges."""
    said, padded = [(0, 570), (620, 980)], [(0, 595), (595, 1020)]
    assert decision_spans(said, RATE, padded) == [(0, 595), (595, 1020)]
    # A pause under 0.5 s does not split.
    assert decision_spans([(0, 570), (615, 980)], RATE, [(0, 592), (592, 1020)]) == [(0, 1020)]


def test_decision_spans__three_seconds_count_speech_not_padding() -> None:
    """2.6 s of speech, then 1.5 s of silence: 3.4 s padded, still under the minimum."""
    said, padded = [(0, 260), (410, 800)], [(0, 300), (370, 840)]
    assert decision_spans(said, RATE, padded) == [(0, 840)]


def test_decision_spans__of_the_vads_stretches_a_half_second_pause_splits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The VAD's probabilities (32 ms frames) of 5.7 s of speech, a 0.51 s pause and 3.6 s:
    the stretches as the engine finds them (`windows.stretches_of_each`) make two spans."""
    runs = [(0.9, 178), (0.05, 16), (0.9, 112), (0.05, 30)]
    probs = np.concatenate([np.full(n, p, np.float32) for p, n in runs])
    monkeypatch.setattr(vad, "probabilities_of", lambda audios: [probs])
    [found] = stretches_of_each([np.zeros(len(probs) * vad.FRAME, np.float32)])
    spans = decision_spans(found.said, vad.RATE, found.padded)
    assert len(found.padded) == 2 and spans == found.padded
