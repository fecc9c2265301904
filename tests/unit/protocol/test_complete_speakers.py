"""A labelled job's result says how many voices were found; fewer than asked completes with a
SpeakersFewer condition, not a failure."""

from __future__ import annotations

from recall.resources import JobStatus, Result
from tests.unit.protocol.test_lease import KEY, completed


def complete(speakers: int | None, asked: int | None) -> JobStatus:
    return completed(Result(transcript=KEY, speakers=speakers, speakers_asked=asked))


def test_complete__fewer_voices_than_asked_say_so() -> None:
    s = complete(2, 3)
    assert s.result is not None and s.result.speakers == 2 and s.phase == "Succeeded"
    (fewer,) = [c for c in s.conditions if c.type == "SpeakersFewer"]
    assert fewer.status == "True" and fewer.reason == "FewerVoices"
    assert "3 speakers were asked for, 2 voices were found" in (fewer.message or "")


def test_complete__no_condition_when_the_voices_asked_were_found_or_none_asked() -> None:
    for speakers, asked in ((3, None), (None, None)):
        assert not [c for c in complete(speakers, asked).conditions if c.type == "SpeakersFewer"]
