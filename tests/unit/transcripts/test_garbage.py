"""What of a job's objects nothing accepted references: the rules by phase, pure."""

from __future__ import annotations

import pytest

from recall.resources import Part, Phase
from recall.transcripts import JobView, attempt_dir, chunk_key, garbage, output_key

T1, T2, T3 = "1" * 32, "2" * 32, "3" * 32


def d(attempt: int, token: str, uid: str = "u") -> str:
    return attempt_dir("ns", "job", uid, attempt, token)


def files(attempt: int, token: str, chunks: int, uid: str = "u") -> list[str]:
    base = d(attempt, token, uid)
    return [base + "cutting.json", *(chunk_key(base, i) for i in range(chunks))]


def view(phase: Phase, attempts: int, **kw: object) -> JobView:
    return JobView(namespace="ns", name="job", uid="u", phase=phase, attempts=attempts, **kw)  # type: ignore[arg-type]


def test_succeeded__everything_but_the_results_transcript_and_outputs() -> None:
    result = d(2, T2) + "transcript.json"
    kept = [result, output_key(d(2, T2), "srt")]
    doomed = files(1, T1, 2) + files(2, T2, 3) + [d(1, T1) + "transcript.json"]
    assert garbage(view(Phase.SUCCEEDED, 2, result=result), kept + doomed) == sorted(doomed)


@pytest.mark.parametrize("phase", [Phase.FAILED, Phase.CANCELLED])
def test_failed_or_cancelled__everything(phase: Phase) -> None:
    keys = files(1, T1, 2) + files(2, T2, 1)
    assert garbage(view(phase, 2), keys) == sorted(keys)


def test_leased__the_holders_own_objects_and_what_the_checkpoint_names_are_kept() -> None:
    parts = (Part(attempt=1, token=T1, first=0, end=2),)
    own = files(2, T2, 5)  # written before the renewal that names them
    carried = files(1, T1, 2)
    beyond = [chunk_key(d(1, T1), 2)]  # a chunk attempt 1 stored but never checkpointed
    v = view(Phase.LEASED, 2, token=T2, parts=parts)
    assert garbage(v, own + carried + beyond) == beyond


def test_queued__every_attempt_so_far_minus_the_checkpoint() -> None:
    parts = (Part(attempt=1, token=T1, first=0, end=1), Part(attempt=2, token=T2, first=1, end=2))
    keys = files(1, T1, 3) + files(2, T2, 2) + files(3, T3, 0)
    v = view(Phase.QUEUED, 3, parts=parts)
    expected = [chunk_key(d(1, T1), 1), chunk_key(d(1, T1), 2), chunk_key(d(2, T2), 0)]
    expected += files(3, T3, 0)  # attempt 3 was released before it stored a chunk
    assert garbage(v, keys) == sorted(expected)


def test_an_attempt_newer_than_the_view_is_kept() -> None:
    # The view was taken before a claim the listing already shows.
    keys = files(1, T1, 1) + files(2, T2, 1)
    v = view(Phase.QUEUED, 1, parts=(Part(attempt=1, token=T1, first=0, end=1),))
    assert garbage(v, keys) == []


def test_objects_of_another_job_or_uid_and_unknown_keys_are_never_named() -> None:
    keys = [*files(1, T1, 1, uid="other"), "scratch/.probe", "scratch/ns/job/u/notes.txt"]
    assert garbage(view(Phase.FAILED, 1), keys) == []


def test_a_succeeded_view_without_a_result_names_nothing() -> None:
    assert garbage(view(Phase.SUCCEEDED, 1), files(1, T1, 2)) == []
