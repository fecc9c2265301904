"""The worker's choice among queued jobs: priority, then age, at random within a window."""

from __future__ import annotations

import collections
import datetime as dt
import random
from typing import Any

from recall.resources import TranscriptionJob
from recall.worker.queue import choose, claimable

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)


def job(
    name: str,
    *,
    priority: int = 0,
    age: int = 0,
    engine: str | None = None,
    backoff: float | None = None,
    suspended: bool = False,
) -> TranscriptionJob:
    spec: dict[str, Any] = {"source": {"url": "file:///m.wav"}, "priority": priority}
    if engine:
        spec["engine"] = {"name": engine}
    status: dict[str, Any] = {"phase": "Queued"}
    if backoff is not None:
        status["backoffSeconds"] = backoff
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
    assert choose(jobs, "whisper", 1, random.Random(0)).name == "high-old"  # type: ignore[union-attr]


def test_choose__spreads_workers_over_the_head_of_the_queue() -> None:
    jobs = [job(f"j{i}", age=100 - i) for i in range(10)]
    rng = random.Random(7)
    picks = collections.Counter(choose(jobs, "whisper", 4, rng).name for _ in range(400))  # type: ignore[union-attr]
    assert set(picks) == {"j0", "j1", "j2", "j3"}
    assert min(picks.values()) > 50


def test_claimable__engine_backoff_and_suspension() -> None:
    assert claimable(job("any"), "whisper")
    assert claimable(job("mine", engine="whisper"), "whisper")
    assert not claimable(job("theirs", engine="openai"), "whisper")
    assert not claimable(job("backing-off", backoff=5), "whisper")
    assert not claimable(job("paused", suspended=True), "whisper")
    assert not claimable(job("real", engine=None), "simulated")
    assert claimable(job("fake", engine="simulated"), "simulated")


def test_choose__nothing_claimable() -> None:
    assert choose([job("later", backoff=60)], "simulated", 4, random.Random(0)) is None
    assert choose([], "simulated", 4, random.Random(0)) is None
