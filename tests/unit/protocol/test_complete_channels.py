"""A split job's result says how many channels were transcribed; a mono file under
`channels: split` completes with a MonoSource condition, not a failure."""

from __future__ import annotations

from recall.resources import JobStatus, Result
from tests.unit.protocol.test_lease import KEY, completed


def complete(channels: int | None) -> JobStatus:
    return completed(Result(transcript=KEY, channels=channels))


def test_complete__a_mono_file_under_split_says_so() -> None:
    s = complete(1)
    assert s.result is not None and s.result.channels == 1
    (mono,) = [c for c in s.conditions if c.type == "MonoSource"]
    assert mono.status == "True" and "one channel" in (mono.message or "")


def test_complete__no_condition_for_a_multichannel_file_or_a_mixed_job() -> None:
    for channels in (2, None):
        assert not [c for c in complete(channels).conditions if c.type == "MonoSource"]
