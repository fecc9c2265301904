"""The language decisions of a multilingual model: the pick among the allowed languages, the
spans segment scope decides on, and the majority. Pure."""

from __future__ import annotations

from recall.engines.languages import (
    LOW_PROBABILITY,
    SEGMENT_SPEECH_SECONDS,
    choose,
    decision_spans,
    majority,
)

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
