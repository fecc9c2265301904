"""A file whose detected language is unlikely (under LOW_LANGUAGE_PROBABILITY) still succeeds,
with a LanguageUncertain condition naming the language and its probability."""

from __future__ import annotations

from recall.resources import LOW_LANGUAGE_PROBABILITY, JobStatus, Phase, Result
from tests.unit.protocol.test_lease import KEY, completed


def complete(language: str | None, probability: float | None) -> JobStatus:
    return completed(Result(transcript=KEY, language=language, language_probability=probability))


def test_complete__an_unlikely_language_succeeds_with_a_condition_naming_it() -> None:
    s = complete("fr", 0.31)
    assert s.phase is Phase.SUCCEEDED
    (cond,) = [c for c in s.conditions if c.type == "LanguageUncertain"]
    assert (cond.status, cond.reason) == ("True", "LowProbability")
    assert "fr" in (cond.message or "") and "0.31" in (cond.message or "")


def test_complete__a_likely_a_given_or_no_language_has_no_condition() -> None:
    for language, p in (("de", LOW_LANGUAGE_PROBABILITY), ("de", 0.99), ("en", None), (None, None)):
        assert not [c for c in complete(language, p).conditions if c.type == "LanguageUncertain"]
