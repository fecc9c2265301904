"""A failure every job of a Batch shares (its model, its language) is said once by the Batch:
one ModelFailing condition, not one per item; each job keeps its own lastError."""

from __future__ import annotations

import datetime as dt

from recall.operator.reconcile.project import project
from recall.operator.reconcile.record import JobRecord
from recall.resources import Batch, BatchStatus, Condition
from tests.unit.fakes import item_record

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
BATCH = Batch.from_api({"metadata": {"name": "talks", "namespace": "ns", "uid": "b1"}, "spec": {}})


def failed(index: int, reason: str, message: str) -> JobRecord:
    return item_record(
        BATCH,
        index,
        {
            "phase": "Failed",
            "attempts": 1,
            "lastError": {"reason": reason, "message": message, "permanent": True},
        },
    )


def model_failing(conditions: list[Condition]) -> list[Condition]:
    return [c for c in conditions if c.type == "ModelFailing"]


def test_project__a_shared_model_failure_is_one_condition() -> None:
    message = "model tiny.en is English-only: it cannot detect the language (spec.language 'auto')"
    jobs = {i: failed(i, "LanguageDetectionUnsupported", message) for i in range(5)}
    p = project(BATCH, 5, str, jobs, BatchStatus(), NOW, frozenset(range(5)))
    [cond] = model_failing(p.status.conditions)
    assert (cond.status, cond.reason) == ("True", "LanguageDetectionUnsupported")
    assert cond.message == message
    assert p.status.counts is not None and p.status.counts.failed == 5
    assert all(a.reason == "LanguageDetectionUnsupported" for a in p.status.attention)


def test_project__other_failures_say_nothing_of_the_model() -> None:
    jobs = {0: failed(0, "SourceNotFound", "file:///a: no such file")}
    p = project(BATCH, 1, str, jobs, BatchStatus(), NOW, frozenset({0}))
    assert model_failing(p.status.conditions) == []


def test_project__model_failing_clears_when_no_job_fails_for_it() -> None:
    jobs = {0: failed(0, "ModelCorrupt", "s3://models/x/: model.bin has sha256 …")}
    first = project(BATCH, 1, str, jobs, BatchStatus(), NOW, frozenset({0}))
    assert model_failing(first.status.conditions)[0].status == "True"
    again = project(BATCH, 1, str, {}, first.status, NOW, frozenset())
    [cond] = model_failing(again.status.conditions)
    assert (cond.status, cond.reason) == ("False", "ModelOk")
