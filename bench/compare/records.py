"""Reading the compared systems' own records, and the arithmetic done on them (pure).

- `celery_meta()` parses one Celery result-backend value (the JSON Celery's Redis backend
  stores under `celery-task-meta-<task id>`).
- `jobs_per_second()` turns a count and two instants into a drain rate.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CeleryMeta:
    """What Celery's result backend says about one task."""

    task_id: str
    status: str
    result: Any
    date_done: float | None  # epoch seconds; None when the backend has no date


def _epoch(value: object) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    when = dt.datetime.fromisoformat(value)
    if when.tzinfo is None:  # Celery writes UTC; older versions without an offset
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def celery_meta(raw: bytes | str) -> CeleryMeta:
    """Parse one result-backend value; raises ValueError when it is not Celery's JSON."""
    try:
        meta = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not a Celery result: {exc}") from exc
    if not isinstance(meta, dict) or "status" not in meta:
        raise ValueError("not a Celery result: no status")
    return CeleryMeta(
        task_id=str(meta.get("task_id", "")),
        status=str(meta["status"]),
        result=meta.get("result"),
        date_done=_epoch(meta.get("date_done")),
    )


def jobs_per_second(done: int, started_at: float, finished_at: float) -> float:
    """`done` jobs between two instants, per second (0 when nothing was done)."""
    if done <= 0:
        return 0.0
    elapsed = finished_at - started_at
    if elapsed <= 0:
        raise ValueError(f"finished {elapsed:.3f} s after it started")
    return done / elapsed
