"""procrastinate on PostgreSQL: the figures of `bench.compare`, measured on a real server.

`figures()` starts PostgreSQL 15 (initdb into a temporary directory, loopback port), applies
procrastinate's schema, runs the throughput, kill and zombie scenarios with worker processes
(`python -m bench.compare.procrastinate_app`), and stops and removes everything.

Counted from the database: a job is done when procrastinate recorded its `succeeded` event
(`procrastinate_events`, stamped by PostgreSQL with this machine's clock), and the drain time
runs from just before the one statement that inserts all the jobs to the last such event.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib.metadata
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psycopg
from procrastinate.schema import SchemaManager

from bench.compare import procrastinate_app, scenarios, servers
from bench.compare.procrastinate_app import BEST, DEFAULTS, THROUGHPUT, Settings
from bench.compare.records import jobs_per_second
from bench.compare.report import Figures

SOURCES = [
    "https://procrastinate.readthedocs.io/en/stable/howto/production/retry_stalled_jobs.html",
    "https://procrastinate.readthedocs.io/en/stable/reference.html (App.run_worker_async, "
    "JobManager.get_stalled_jobs)",
]


class Cluster:
    """PostgreSQL with procrastinate's schema, and the workers started against it."""

    def __init__(self, server: servers.Postgres, children: servers.Children, workdir: Path):
        self.server = server
        self.children = children
        self.workdir = workdir
        self.runlog = workdir / "runs.jsonl"
        self.workers: list[subprocess.Popen[bytes]] = []
        self._started = 0
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute(SchemaManager.get_schema())

    def sql(self, query: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.server.dsn, autocommit=True) as conn:
            cursor = conn.execute(query, tuple(params))
            return list(cursor.fetchall()) if cursor.description else []

    def reset(self) -> None:
        self.stop_workers()
        self.sql(
            "TRUNCATE procrastinate_events, procrastinate_periodic_defers, procrastinate_jobs, "
            "procrastinate_workers RESTART IDENTITY CASCADE"
        )

    def start_workers(self, count: int, settings: str) -> list[subprocess.Popen[bytes]]:
        """Start `count` workers; return once each is registered and LISTENing for jobs."""
        procs = []
        for _ in range(count):
            self._started += 1
            name = f"w{self._started}"
            procs.append(
                self.children.start(
                    [
                        sys.executable, "-m", "bench.compare.procrastinate_app",
                        "--dsn", self.server.dsn,
                        "--settings", settings,
                        "--name", name,
                    ],
                    log=self.workdir / f"worker-{name}.log",
                    env=servers.python_env(),
                )
            )  # fmt: skip
        self.workers += procs

        def ready() -> bool | None:
            for proc in procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"a procrastinate worker exited with {proc.returncode}")
            (registered,) = self.sql("SELECT count(*) FROM procrastinate_workers")[0]
            (listening,) = self.sql(
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %%'"
            )[0]
            expected = len(self.workers)
            return True if registered >= expected and listening >= expected else None

        scenarios.wait_for(ready, 120, f"{count} procrastinate workers ready", step=0.1)
        return procs

    def stop_workers(self) -> None:
        for proc in self.workers:
            self.children.stop(proc, grace=10.0)
        self.workers = []

    def defer(self, task: str, kwargs: list[dict[str, Any]]) -> float:
        """Insert the jobs in one statement; returns the time (epoch) just before it."""

        async def go() -> float:
            app = procrastinate_app.make_app(self.server.dsn, THROUGHPUT)
            async with app.open_async():
                deferrer = app.configure_task(task)
                began = time.time()
                await deferrer.batch_defer_async(*kwargs)
                return began

        return asyncio.run(go())

    def enqueue_slow(self, job: str, seconds: float) -> None:
        self.defer("bench.slow", [{"job": job, "seconds": seconds, "log": str(self.runlog)}])

    def snapshot(self, job: str) -> scenarios.Snapshot:
        rows = self.sql(
            "SELECT id, status, attempts FROM procrastinate_jobs "
            "WHERE task_name = 'bench.slow' AND args->>'job' = %s",
            [job],
        )
        if not rows:
            return scenarios.Snapshot(False, "absent", "no job row")
        job_id, status, attempts = rows[0]
        events = [t for (t,) in self.sql(
            "SELECT type FROM procrastinate_events WHERE job_id = %s ORDER BY id", [job_id]
        )]  # fmt: skip
        succeeded = events.count("succeeded")
        return scenarios.Snapshot(
            done=status == "succeeded",
            fingerprint=f"{status}/{attempts}/{succeeded}",
            text=f"procrastinate_jobs status={status} attempts={attempts}, "
            f"procrastinate_events {', '.join(events)}",
        )

    def refused_completions(self) -> int:
        """Completions the database refused, as the workers logged them."""
        return sum(
            path.read_text(errors="replace").count('not in "doing" or "todo" status')
            for path in self.workdir.glob("worker-*.log")
        )

    def drain(self, jobs: int, workers: int) -> float:
        """jobs/s of `workers` workers draining `jobs` zero-work jobs, from the database."""
        self.reset()
        self.start_workers(workers, THROUGHPUT.to_json())
        try:
            began = self.defer("bench.noop", [{} for _ in range(jobs)])

            def drained() -> float | None:
                (done, last) = self.sql(
                    "SELECT count(*), extract(epoch FROM max(at))::float8 "
                    "FROM procrastinate_events WHERE type = 'succeeded'"
                )[0]
                return float(last) if done >= jobs else None

            last = scenarios.wait_for(drained, max(120.0, jobs / 5), "drain", step=0.2)
            (succeeded,) = self.sql(
                "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
            )[0]
            return jobs_per_second(int(succeeded), began, last)
        finally:
            self.stop_workers()


def figures(
    *,
    jobs: int = 2000,
    workers: Iterable[int] = (1, 4, 16),
    kill_wait: float = 30.0,
    job_seconds: float = 4.0,
    workdir: Path | None = None,
) -> Figures:
    """procrastinate's figures (see `bench.compare`); everything started is stopped."""
    counts = list(workers)
    with contextlib.ExitStack() as stack:
        base = Path(tempfile.mkdtemp(prefix="recall-compare-procrastinate-", dir=workdir))
        stack.callback(shutil.rmtree, base, ignore_errors=True)
        children = servers.Children()
        stack.callback(children.stop_all)
        server = stack.enter_context(servers.postgres(children, base))
        cluster = Cluster(server, children, base)
        stack.callback(cluster.stop_workers)

        rates = {w: cluster.drain(jobs, w) for w in counts}
        kill = {
            name: scenarios.kill_to_rerun(
                cluster, s.to_json(), job=f"kill-{name}", job_seconds=job_seconds, wait=kill_wait
            )
            for name, s in (("defaults", DEFAULTS), ("best", BEST))
        }
        zombies = []
        for resumed in ("during_rerun", "after_rerun"):
            refused_before = cluster.refused_completions()
            case = scenarios.zombie(
                cluster,
                BEST.to_json(),
                job=f"zombie-{resumed}",
                job_seconds=job_seconds,
                wait=kill_wait,
                resumed=resumed,
            )
            refused = cluster.refused_completions() - refused_before
            case["evidence"] += f"; completions refused by the database: {refused}"
            zombies.append(case)

    return Figures(
        system=f"procrastinate {importlib.metadata.version('procrastinate')} on "
        f"PostgreSQL {server.version}",
        jobs=jobs,
        jobs_per_second=rates,
        kill_to_rerun_seconds=kill,
        kill_wait_seconds=kill_wait,
        documented_rerun={
            "defaults": "never without the retry task the docs prescribe; with it every 10 min "
            "and a 30 s heartbeat silence, 30 s to 10.5 min",
            "best": f"{BEST.seconds_since_heartbeat:.0f} s of heartbeat silence + up to "
            f"{BEST.update_heartbeat_interval:.0f} s since the last beat + the next retry "
            "tick (1 s)",
        },
        zombie=zombies,
        zombie_result_accepted=zombies[0]["accepted"],
        settings={
            "throughput": _shown(THROUGHPUT),
            "defaults": _shown(DEFAULTS),
            "best": _shown(BEST),
        },
        sources=SOURCES,
        notes=[
            "each worker is one process running one job at a time (concurrency 1, the default); "
            "jobs are inserted in one batch once all workers LISTEN",
            "PostgreSQL runs with fsync, synchronous_commit and full_page_writes off",
            "the zombie scenarios use the best settings (at the defaults no re-run comes within "
            "the wait)",
        ],
    )


def _shown(settings: Settings) -> dict[str, Any]:
    return {k: v for k, v in dataclasses.asdict(settings).items() if v is not None} | (
        {} if settings.retry_cron else {"retry_stalled_jobs task": "none"}
    )


if __name__ == "__main__":  # a quick look: python -m bench.compare.procrastinate_bench
    import json

    started = time.monotonic()
    print(json.dumps(figures(jobs=500, workers=(1, 4)), indent=2))
    print(f"{time.monotonic() - started:.0f} s", file=sys.stderr)
