"""The run log: each execution of a benchmark job appends when it starts and ends.

Jobs of every compared system call `record()`; the harness reads the log with `read()` and
answers its questions with the pure functions below. The log says what ran where and when
(process id, wall-clock time of this machine); what each system *accepted* as the result is
read from its own records instead (rows in PostgreSQL, result keys in Redis).

One line of JSON per event, written with a single `write` to a file opened `O_APPEND`, so lines
of concurrent processes never interleave. A process killed while writing can leave a partial
last line; `parse()` skips it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Event = Literal["start", "end"]


@dataclass(frozen=True)
class Run:
    """One event of one execution: job `job` started or ended in process `pid` at `t`."""

    job: str
    event: Event
    pid: int
    t: float


def record(path: str, job: str, event: Event) -> None:
    """Append one event for this process (called from inside a job)."""
    line = json.dumps({"job": job, "event": event, "pid": os.getpid(), "t": time.time()})
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def parse(lines: Iterable[str]) -> list[Run]:
    """The events in `lines`, skipping blank, partial or foreign lines."""
    runs: list[Run] = []
    for line in lines:
        try:
            raw = json.loads(line)
            event = raw["event"]
            if event not in ("start", "end"):
                continue
            runs.append(Run(str(raw["job"]), event, int(raw["pid"]), float(raw["t"])))
        except (ValueError, KeyError, TypeError):
            continue
    return runs


def read(path: Path) -> list[Run]:
    """The events logged so far (none if nothing ran yet)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return parse(text.splitlines())


def events(runs: Sequence[Run], job: str, event: Event) -> list[Run]:
    """The `event`s of `job`, in log order."""
    return [run for run in runs if run.job == job and run.event == event]


def rerun_delay(runs: Sequence[Run], job: str, *, lost_pid: int, lost_at: float) -> float | None:
    """Seconds from `lost_at` to the first start of `job` by a process other than `lost_pid`.

    None when no other process has started the job since `lost_at`.
    """
    for run in events(runs, job, "start"):
        if run.pid != lost_pid and run.t >= lost_at:
            return run.t - lost_at
    return None
