"""Reading Celery's result backend values, and the drain-rate arithmetic of bench.compare."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from bench.compare.records import celery_meta, jobs_per_second


def test_celery_meta__success_with_offset() -> None:
    raw = json.dumps(
        {
            "status": "SUCCESS",
            "result": {"pid": 42},
            "traceback": None,
            "children": [],
            "date_done": "2026-11-29T12:00:01.500000+00:00",
            "task_id": "t-1",
        }
    ).encode()
    meta = celery_meta(raw)
    assert meta.task_id == "t-1"
    assert meta.status == "SUCCESS"
    assert meta.result == {"pid": 42}
    assert meta.date_done == dt.datetime(2026, 11, 29, 12, 0, 1, 500000, tzinfo=dt.UTC).timestamp()


def test_celery_meta__naive_date_is_utc() -> None:
    meta = celery_meta('{"status": "SUCCESS", "date_done": "2026-11-29T12:00:00"}')
    assert meta.date_done == dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC).timestamp()


def test_celery_meta__pending_without_date() -> None:
    meta = celery_meta('{"status": "STARTED", "result": null, "date_done": null}')
    assert (meta.status, meta.date_done, meta.task_id) == ("STARTED", None, "")


@pytest.mark.parametrize("raw", [b"not json", b"[1, 2]", b'{"result": 1}'])
def test_celery_meta__refuses_what_is_not_a_result(raw: bytes) -> None:
    with pytest.raises(ValueError, match="not a Celery result"):
        celery_meta(raw)


def test_jobs_per_second() -> None:
    assert jobs_per_second(2000, 100.0, 104.0) == 500.0
    assert jobs_per_second(0, 100.0, 100.0) == 0.0


def test_jobs_per_second__refuses_an_end_before_the_start() -> None:
    with pytest.raises(ValueError, match="after it started"):
        jobs_per_second(10, 100.0, 99.0)
