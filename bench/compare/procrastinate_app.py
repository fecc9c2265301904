"""The procrastinate application the benchmark's workers run, and their entry point.

    python -m bench.compare.procrastinate_app --dsn DSN --settings JSON --name w1

Tasks (names fixed, so the harness can defer them without importing this module's tasks):
- `bench.noop`: does nothing (the throughput workload).
- `bench.slow(job, seconds, log)`: logs its start, sleeps, logs its end (see `runs`).
- `bench.retry_stalled_jobs`: procrastinate's documented way to re-run the jobs of killed
  workers (howto "Retry stalled jobs"), registered only when `settings.retry_cron` is set.

Procrastinate has no built-in re-run of a killed worker's jobs: "if no specific action is
taken, these stalled jobs will remain in the queue forever". Its documentation prescribes a
periodic task that retries `get_stalled_jobs()`; that task is part of the setup measured here.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import time

import procrastinate

from bench.compare import runs


@dataclasses.dataclass(frozen=True)
class Settings:
    """A worker's settings; the defaults are procrastinate's documented ones.

    Sources: `App.run_worker_async` (update_heartbeat_interval "defaults to 10",
    stalled_worker_timeout "defaults to 30", concurrency "defaults to 1"),
    `JobManager.get_stalled_jobs` (seconds_since_heartbeat "Defaults to 30 seconds"), and the
    howto "Retry stalled jobs" (the periodic retry task, `cron="*/10 * * * *"`).
    https://procrastinate.readthedocs.io/en/stable/howto/production/retry_stalled_jobs.html
    https://procrastinate.readthedocs.io/en/stable/reference.html
    """

    update_heartbeat_interval: float = 10.0
    stalled_worker_timeout: float = 30.0
    concurrency: int = 1
    retry_cron: str | None = "*/10 * * * *"
    seconds_since_heartbeat: float = 30.0

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Settings:
        return cls(**json.loads(text))


DEFAULTS = Settings()
# The fastest reasonable re-run: a heartbeat every second, a worker stalled after three missed
# beats, the retry task every second (procrastinate's cron takes a sixth column for seconds).
BEST = Settings(
    update_heartbeat_interval=1.0,
    stalled_worker_timeout=3.0,
    retry_cron="* * * * * *",
    seconds_since_heartbeat=3.0,
)
# Throughput runs register no retry task, so every job the workers run is a benchmark job.
THROUGHPUT = dataclasses.replace(DEFAULTS, retry_cron=None)


def make_app(dsn: str, settings: Settings) -> procrastinate.App:
    """An App on `dsn` with the benchmark's tasks registered."""
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @app.task(name="bench.noop")
    async def noop() -> None:
        return None

    @app.task(name="bench.slow")
    def slow(job: str, seconds: float, log: str) -> None:
        # Blocking, as an engine call is: the worker's heartbeat goes on in its event loop.
        runs.record(log, job, "start")
        time.sleep(seconds)
        runs.record(log, job, "end")

    if settings.retry_cron is not None:
        stalled_after = settings.seconds_since_heartbeat

        @app.periodic(cron=settings.retry_cron)
        @app.task(name="bench.retry_stalled_jobs", queueing_lock="retry_stalled_jobs")
        async def retry_stalled_jobs(timestamp: int) -> None:
            manager = app.job_manager
            for job in await manager.get_stalled_jobs(seconds_since_heartbeat=stalled_after):
                await manager.retry_job(job)

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description="a procrastinate worker for bench.compare")
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--settings", default=DEFAULTS.to_json())
    parser.add_argument("--name", default="worker")
    args = parser.parse_args()
    settings = Settings.from_json(args.settings)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    make_app(args.dsn, settings).run_worker(
        name=args.name,
        concurrency=settings.concurrency,
        update_heartbeat_interval=settings.update_heartbeat_interval,
        stalled_worker_timeout=settings.stalled_worker_timeout,
    )


if __name__ == "__main__":
    main()
