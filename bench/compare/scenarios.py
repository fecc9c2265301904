"""The two fault scenarios, written once for every compared system.

- `kill_to_rerun()`: two workers; one runs a slow job and is killed with SIGKILL mid-job;
  how long until the job starts again on the other worker (bounded wait).
- `zombie()`: two workers; the one running a slow job is frozen with SIGSTOP until the job is
  re-run on the other, then resumed with SIGCONT (while the re-run is still going, or after
  it finished). Does the system record the frozen worker's late completion?

A system takes part through `Cluster`: start and stop its workers, enqueue the slow job, and
take a `Snapshot` of what its own records say about the job. Starts and ends of executions come
from the run log (`runs`); acceptance comes only from the snapshots.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from bench.compare import runs
from bench.compare.report import Zombie

T = TypeVar("T")

START_TIMEOUT = 60.0  # for a job to start on an idle worker (workers may still be importing)
MID_JOB = 0.5  # how long into the job the worker is killed or frozen


@dataclass(frozen=True)
class Snapshot:
    """What a system's own records say about one job at one moment."""

    done: bool  # the records hold a completed result for the job
    fingerprint: str  # changes whenever the recorded outcome changes
    text: str  # human-readable, for the evidence


class Cluster(Protocol):
    runlog: Path

    def start_workers(self, count: int, settings: str) -> list[subprocess.Popen[bytes]]:
        """Start `count` workers with `settings` (JSON) and return once they take jobs."""
        ...

    def stop_workers(self) -> None: ...

    def reset(self) -> None:
        """Forget every job and result (workers stopped)."""
        ...

    def enqueue_slow(self, job: str, seconds: float) -> None: ...

    def snapshot(self, job: str) -> Snapshot: ...


def wait_for(probe: Callable[[], T | None], timeout: float, what: str, step: float = 0.05) -> T:
    """The first non-None value of `probe()`; TimeoutError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(step)


def _first_start(cluster: Cluster, job: str) -> runs.Run | None:
    started = runs.events(runs.read(cluster.runlog), job, "start")
    return started[0] if started else None


def _worker(procs: list[subprocess.Popen[bytes]], pid: int) -> subprocess.Popen[bytes]:
    for proc in procs:
        if proc.pid == pid:
            return proc
    raise RuntimeError(f"the job ran in pid {pid}, which is none of the workers started")


def kill_to_rerun(
    cluster: Cluster,
    settings: str,
    *,
    job: str,
    job_seconds: float,
    wait: float,
    job_process_only: bool = False,
) -> float | None:
    """Seconds from a worker's SIGKILL mid-job to the job's start in another process.

    With `job_process_only`, only the process that runs the job is killed (a pool child whose
    worker lives on), not the worker process. None when the job did not start again within
    `wait` seconds.
    """
    cluster.reset()
    procs = cluster.start_workers(2, settings)
    try:
        cluster.enqueue_slow(job, job_seconds)
        first = wait_for(lambda: _first_start(cluster, job), START_TIMEOUT, f"{job} started")
        victim = None if job_process_only else _worker(procs, first.pid)
        time.sleep(MID_JOB)
        os.kill(first.pid, signal.SIGKILL)
        lost_at = time.time()
        if victim is not None:
            victim.wait(10)

        def rerun() -> float | None:
            return runs.rerun_delay(
                runs.read(cluster.runlog), job, lost_pid=first.pid, lost_at=lost_at
            )

        try:
            return wait_for(rerun, wait, f"{job} re-run")
        except TimeoutError:
            return None
    finally:
        cluster.stop_workers()


def zombie(
    cluster: Cluster, settings: str, *, job: str, job_seconds: float, wait: float, resumed: str
) -> Zombie:
    """Freeze the worker running `job` until another re-runs it, resume it, read the records.

    `resumed` is "during_rerun" (SIGCONT as soon as the re-run started; the frozen worker's
    sleep is over, so it completes first) or "after_rerun" (SIGCONT once the re-run completed).
    """
    if resumed not in ("during_rerun", "after_rerun"):
        raise ValueError(f"resumed must be during_rerun or after_rerun, not {resumed!r}")
    cluster.reset()
    procs = cluster.start_workers(2, settings)
    frozen: subprocess.Popen[bytes] | None = None
    try:
        cluster.enqueue_slow(job, job_seconds)
        first = wait_for(lambda: _first_start(cluster, job), START_TIMEOUT, f"{job} started")
        frozen = _worker(procs, first.pid)
        frozen_pid = frozen.pid
        time.sleep(MID_JOB)
        os.kill(frozen_pid, signal.SIGSTOP)
        frozen_at = time.time()

        def rerun() -> runs.Run | None:
            for run in runs.events(runs.read(cluster.runlog), job, "start"):
                if run.pid != frozen_pid and run.t >= frozen_at:
                    return run
            return None

        def ended(pid: int) -> runs.Run | None:
            for run in runs.events(runs.read(cluster.runlog), job, "end"):
                if run.pid == pid:
                    return run
            return None

        try:
            second = wait_for(rerun, wait, f"{job} re-run")
        except TimeoutError:
            return Zombie(
                resumed=resumed,
                accepted=None,
                evidence=f"the job was not re-run within {wait:.0f} s of the freeze",
            )
        who = f"zombie pid {frozen_pid}, re-run pid {second.pid}"
        if resumed == "after_rerun":
            wait_for(lambda: ended(second.pid), job_seconds + 30, f"{job} re-run ended")

            def recorded() -> Snapshot | None:
                now = cluster.snapshot(job)
                return now if now.done else None

            before = wait_for(recorded, 10, f"{job} re-run's result recorded")
        else:
            before = cluster.snapshot(job)
        os.kill(frozen_pid, signal.SIGCONT)
        wait_for(lambda: ended(frozen_pid), job_seconds + 10, f"{job} zombie ended")
        # A completion is recorded within milliseconds of the job function's return; during the
        # re-run, look no longer than a second, well before the re-run itself can complete.
        after = _settle(cluster, job, before, timeout=1.0 if resumed == "during_rerun" else 3.0)
        rerun_done_early = resumed == "during_rerun" and ended(second.pid) is not None
        if resumed == "during_rerun":
            wait_for(lambda: ended(second.pid), job_seconds + 30, f"{job} re-run ended")
            time.sleep(1.0)
            final = cluster.snapshot(job)
            if rerun_done_early:
                return Zombie(
                    resumed=resumed,
                    accepted=None,
                    evidence=f"inconclusive: the re-run ended before the zombie's completion "
                    f"could be read ({who}); {after.text}",
                )
            return Zombie(
                resumed=resumed,
                accepted=after.done,
                evidence=f"{who}; while the re-run ran: {before.text}; after the zombie "
                f"completed: {after.text}; after the re-run completed: {final.text}",
            )
        return Zombie(
            resumed=resumed,
            accepted=after.fingerprint != before.fingerprint,
            evidence=f"{who}; after the re-run completed: {before.text}; after the zombie "
            f"completed: {after.text}",
        )
    finally:
        if frozen is not None and frozen.poll() is None:
            os.kill(frozen.pid, signal.SIGCONT)
        cluster.stop_workers()


def _settle(cluster: Cluster, job: str, before: Snapshot, timeout: float) -> Snapshot:
    """The records shortly after a completion: the first change from `before`, or as they are
    after `timeout` seconds (a system writes its record just after the job function returns)."""
    deadline = time.monotonic() + timeout
    while True:
        now = cluster.snapshot(job)
        if now.fingerprint != before.fingerprint or time.monotonic() >= deadline:
            return now
        time.sleep(0.05)
