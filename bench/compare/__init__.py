"""recall side by side with what people pick instead: procrastinate on PostgreSQL and Celery on
Redis, on this machine, with real servers the benchmark starts and stops itself.

API (each call starts its server on a loopback port with its files in a temporary directory,
runs worker processes, and stops and removes everything before it returns or raises, on
KeyboardInterrupt too):

    from bench import compare
    figures = compare.procrastinate_figures(jobs=2000, workers=(1, 4, 16))
    figures = compare.celery_figures(jobs=2000, workers=(1, 4, 16))
    results = compare.run_all()                    # {"procrastinate": ..., "Celery": ...}
    markdown = compare.render_markdown(results)    # a table, one column per system

    python -m bench.compare [--jobs 2000] [--workers 1,4,16] [--kill-wait 30] [--markdown]

Each returns a `Figures` dict (`bench.compare.report`):
- `jobs_per_second[W]`: W worker processes (one job at a time each) drain `jobs` zero-work
  jobs that are all queued when the workers start taking them; counted from the system's own
  records (procrastinate's `succeeded` events in PostgreSQL, Celery's SUCCESS results in Redis).
- `kill_to_rerun_seconds["defaults" | "best"]`: a worker running a `job_seconds` job is killed
  with SIGKILL; seconds until the job starts again on the other worker, None when it did not
  within `kill_wait` seconds. `documented_rerun` says what the documentation leads one to
  expect, and `settings` which settings each case used.
- `zombie_result_accepted`: a worker running a job is frozen (SIGSTOP) until the job was re-run
  on another worker (best settings), then resumed (SIGCONT) while the re-run still runs: True
  when the system records the frozen worker's late completion as the job's result. `zombie`
  holds that case and the one resumed after the re-run completed, with the evidence read from
  the system's records.

Defaults take a few minutes on two cores (most of it starting worker processes and waiting out
the bounded waits). The servers run without durability (no fsync, no snapshots), like the etcd
of recall's own benchmarks. Needs the `bench` extra (procrastinate, Celery, psycopg, redis),
PostgreSQL 15 under /usr/lib/postgresql/15/bin and redis-server (hack/install-system-deps.sh).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from bench.compare.report import Figures, render_markdown

__all__ = ["Figures", "celery_figures", "procrastinate_figures", "render_markdown", "run_all"]


def procrastinate_figures(
    *,
    jobs: int = 2000,
    workers: Iterable[int] = (1, 4, 16),
    kill_wait: float = 30.0,
    job_seconds: float = 4.0,
    workdir: Path | None = None,
) -> Figures:
    """procrastinate on PostgreSQL; `workdir` is where its temporary directory goes."""
    from bench.compare import procrastinate_bench

    return procrastinate_bench.figures(
        jobs=jobs, workers=workers, kill_wait=kill_wait, job_seconds=job_seconds, workdir=workdir
    )


def celery_figures(
    *,
    jobs: int = 2000,
    workers: Iterable[int] = (1, 4, 16),
    kill_wait: float = 30.0,
    job_seconds: float = 4.0,
    workdir: Path | None = None,
) -> Figures:
    """Celery on Redis; `workdir` is where its temporary directory goes."""
    from bench.compare import celery_bench

    return celery_bench.figures(
        jobs=jobs, workers=workers, kill_wait=kill_wait, job_seconds=job_seconds, workdir=workdir
    )


def run_all(
    *,
    jobs: int = 2000,
    workers: Iterable[int] = (1, 4, 16),
    kill_wait: float = 30.0,
    job_seconds: float = 4.0,
) -> dict[str, Figures]:
    """Both systems, one after the other (never at the same time: they share two cores)."""
    counts = tuple(workers)
    return {
        "procrastinate": procrastinate_figures(
            jobs=jobs, workers=counts, kill_wait=kill_wait, job_seconds=job_seconds
        ),
        "Celery": celery_figures(
            jobs=jobs, workers=counts, kill_wait=kill_wait, job_seconds=job_seconds
        ),
    }
