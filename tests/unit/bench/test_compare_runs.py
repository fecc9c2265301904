"""The run log of bench.compare: what the jobs write and what the harness reads back."""

from __future__ import annotations

import json
import os
from pathlib import Path

from bench.compare import runs
from bench.compare.runs import Run


def line(job: str, event: str, pid: int, t: float) -> str:
    return json.dumps({"job": job, "event": event, "pid": pid, "t": t})


def test_record__appends_one_line_per_event_with_this_pid(tmp_path: Path) -> None:
    log = tmp_path / "runs.jsonl"
    runs.record(str(log), "a", "start")
    runs.record(str(log), "a", "end")
    read = runs.read(log)
    assert [(r.job, r.event, r.pid) for r in read] == [
        ("a", "start", os.getpid()),
        ("a", "end", os.getpid()),
    ]
    assert read[0].t <= read[1].t


def test_read__missing_log_is_empty(tmp_path: Path) -> None:
    assert runs.read(tmp_path / "none.jsonl") == []


def test_parse__skips_partial_blank_and_foreign_lines() -> None:
    lines = [
        line("a", "start", 1, 10.0),
        "",
        '{"job": "a", "event": "end", "pid": 1, "t": 1',  # cut by a SIGKILL mid-write
        '{"job": "a", "event": "paused", "pid": 1, "t": 11.0}',
        '{"job": "a", "pid": 1}',
        "[1, 2]",
        line("a", "end", 1, 12.0),
    ]
    assert runs.parse(lines) == [Run("a", "start", 1, 10.0), Run("a", "end", 1, 12.0)]


def test_rerun_delay__first_start_by_another_process_after_the_loss() -> None:
    log = [
        Run("j", "start", 1, 100.0),  # the worker that is lost at 101
        Run("other", "start", 2, 101.5),  # another job: not a re-run
        Run("j", "start", 2, 100.5),  # before the loss: not a re-run of it
        Run("j", "start", 3, 104.0),
        Run("j", "start", 4, 105.0),
    ]
    assert runs.rerun_delay(log, "j", lost_pid=1, lost_at=101.0) == 3.0


def test_rerun_delay__none_when_only_the_lost_process_started_it() -> None:
    log = [Run("j", "start", 1, 100.0), Run("j", "start", 1, 102.0)]
    assert runs.rerun_delay(log, "j", lost_pid=1, lost_at=101.0) is None


def test_events__filters_by_job_and_event_in_log_order() -> None:
    log = [Run("j", "start", 1, 1.0), Run("k", "start", 2, 2.0), Run("j", "end", 1, 3.0)]
    assert runs.events(log, "j", "start") == [Run("j", "start", 1, 1.0)]
    assert runs.events(log, "j", "end") == [Run("j", "end", 1, 3.0)]
