"""The worker's choice among queued jobs: priority, then age, at random within a window."""

from __future__ import annotations

import collections
import datetime as dt
import random
from typing import Any

from recall.models import TranscriptionJob
from recall.queue import choose, claimable

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)


def job(
    name: str,
    *,
    priority: int = 0,
    age: int = 0,
    engine: str | None = None,
    not_before: int | None = None,
    suspended: bool = False,
) -> TranscriptionJob:
    spec: dict[str, Any] = {"source": {"url": "file:///m.wav"}, "priority": priority}
    if engine:
        spec["engine"] = {"name": engine}
    status: dict[str, Any] = {"phase": "Queued"}
    if not_before is not None:
        status["notBefore"] = (NOW + dt.timedelta(seconds=not_before)).isoformat()
    return TranscriptionJob.from_api(
        {
            "metadata": {
                "name": name,
                "creationTimestamp": (NOW - dt.timedelta(seconds=age)).isoformat(),
                "labels": {"recall.dev/suspended": "true"} if suspended else {},
            },
            "spec": spec,
            "status": status,
        }
    )


def test_choose__highest_priority_then_oldest() -> None:
    jobs = [
        job("low-old", priority=0, age=100),
        job("high-new", priority=5, age=1),
        job("high-old", priority=5, age=50),
    ]
    assert choose(jobs, NOW, "whisper", 1, random.Random(0)).name == "high-old"  # type: ignore[union-attr]


def test_choose__spreads_workers_over_the_head_of_the_queue() -> None:
    jobs = [job(f"j{i}", age=100 - i) for i in range(10)]
    rng = random.Random(7)
    picks = collections.Counter(choose(jobs, NOW, "whisper", 4, rng).name for _ in range(400))  # type: ignore[union-attr]
    assert set(picks) == {"j0", "j1", "j2", "j3"}
    assert min(picks.values()) > 50


def test_claimable__engine_backoff_and_suspension() -> None:
    assert claimable(job("any"), NOW, "whisper")
    assert claimable(job("mine", engine="whisper"), NOW, "whisper")
    assert not claimable(job("theirs", engine="openai"), NOW, "whisper")
    assert not claimable(job("later", not_before=5), NOW, "whisper")
    assert claimable(job("due", not_before=0), NOW, "whisper")
    assert not claimable(job("paused", suspended=True), NOW, "whisper")
    assert not claimable(job("real", engine=None), NOW, "simulated")
    assert claimable(job("fake", engine="simulated"), NOW, "simulated")


def test_choose__nothing_claimable() -> None:
    assert choose([job("later", not_before=60)], NOW, "simulated", 4, random.Random(0)) is None
    assert choose([], NOW, "simulated", 4, random.Random(0)) is None
