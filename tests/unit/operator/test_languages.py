"""A Batch counts its completed items by language (given or detected), and the counts stay when
its jobs are deleted (the TTL)."""

from __future__ import annotations

import datetime as dt

from recall.operator.reconcile.project import project
from recall.operator.reconcile.record import JobRecord
from recall.resources import Batch, BatchStatus
from tests.unit.fakes import item_record

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
BATCH = Batch.from_api({"metadata": {"name": "talks", "namespace": "ns", "uid": "b1"}, "spec": {}})


def job(index: int, phase: str, language: str | None = None) -> JobRecord:
    status: dict[str, object] = {"phase": phase, "attempts": 1}
    if phase == "Succeeded":
        status["result"] = {"transcript": f"k{index}", "language": language}
    return item_record(BATCH, index, status)


def test_project__counts_completed_items_by_language() -> None:
    jobs = {
        0: job(0, "Succeeded", "de"),
        1: job(1, "Succeeded", "de"),
        2: job(2, "Succeeded", "fr"),
        3: job(3, "Leased"),
        4: job(4, "Succeeded", None),  # a result without a language is not counted
    }
    p = project(BATCH, 5, str, jobs, BatchStatus(), NOW, frozenset(range(5)))
    assert p.status.languages == {"de": 2, "fr": 1}
    assert p.status.model_dump(by_alias=True, exclude_none=True)["languages"] == {"de": 2, "fr": 1}


def test_project__language_counts_stay_after_the_jobs_are_deleted() -> None:
    jobs = {i: job(i, "Succeeded", "es" if i < 2 else "it") for i in range(3)}
    first = project(BATCH, 3, str, jobs, BatchStatus(), NOW, frozenset(range(3)))
    assert first.status.languages == {"es": 2, "it": 1}
    # The TTL deleted every job: the items stay completed, and so do the language counts.
    gone = project(BATCH, 3, str, {}, first.status, NOW, frozenset(range(3)))
    assert gone.status.counts is not None and gone.status.counts.completed == 3
    assert gone.status.languages == {"es": 2, "it": 1}
    # Some jobs gone, one left: nothing counted twice.
    some = project(BATCH, 3, str, {2: jobs[2]}, gone.status, NOW, frozenset())
    assert some.status.languages == {"es": 2, "it": 1}
