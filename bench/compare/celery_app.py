"""The Celery application the benchmark's workers run, and their entry point.

    python -m bench.compare.celery_app --broker URL --backend URL --settings JSON \\
        --name w1 --queues bench --logfile PATH

Each worker is one process running one task at a time (`--pool=solo`), as a recall worker and
a procrastinate worker (concurrency 1) are, so "W workers" means W processes for all three. A
worker's SIGKILL is then the loss of the whole worker (its pod or its node). With
`pool="prefork"` (Celery's default pool) a worker is a parent process and one child that runs
the task, so the child alone can be killed under a live parent.

Tasks (names fixed, so the harness can send them by name):
- `bench.noop`: does nothing (the throughput workload).
- `bench.slow(job, seconds, log)`: logs its start, sleeps, logs its end (see `runs`), and
  returns which process ran it, so the result backend shows whose result it kept.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from typing import Any

from celery import Celery

from bench.compare import runs


@dataclasses.dataclass(frozen=True)
class Settings:
    """The settings that decide what happens to a killed worker's task; the defaults are
    Celery's and Kombu's documented ones.

    - task_acks_late "Default: Disabled": the message is acknowledged just before the task
      runs, so a worker lost mid-task loses the task.
    - task_reject_on_worker_lost "Default: Disabled" (with acks_late, re-queue the task when
      the process running it dies; it acts when a prefork child dies under a live parent).
    - worker_prefetch_multiplier "Default: 4".
    - visibility_timeout: "The default visibility timeout for Redis is 1 hour": an unacked
      message goes back to the queue that long after it was delivered.
    - unacked_restore_interval / unacked_restore_throttle (Kombu's Redis transport, 10 and 10):
      a live worker looks for such messages about every 100 s.
    https://docs.celeryq.dev/en/stable/userguide/configuration.html
    https://docs.celeryq.dev/en/stable/getting-started/backends-and-brokers/redis.html
    https://docs.celeryq.dev/projects/kombu/en/stable/reference/kombu.transport.redis.html
    """

    task_acks_late: bool = False
    task_reject_on_worker_lost: bool = False
    worker_prefetch_multiplier: int = 4
    visibility_timeout: int = 3600
    unacked_restore_interval: int = 10
    unacked_restore_throttle: int = 10
    pool: str = "solo"  # not Celery's default (prefork): see the module docstring

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Settings:
        return cls(**json.loads(text))


DEFAULTS = Settings()


def best(job_seconds: float) -> Settings:
    """The fastest reasonable re-run for jobs of `job_seconds`: late ack, no prefetch, and a
    visibility timeout of at least twice the job (a shorter one re-runs every job that is
    still running), swept every second."""
    return Settings(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        visibility_timeout=max(10, int(2 * job_seconds + 0.999)),
        unacked_restore_interval=1,
        unacked_restore_throttle=1,
    )


def make_app(broker: str, backend: str, settings: Settings) -> Celery:
    """A Celery app on Redis `broker` with results in Redis `backend`."""
    app = Celery("bench", broker=broker, backend=backend)
    transport: dict[str, Any] = {
        "visibility_timeout": settings.visibility_timeout,
        "unacked_restore_interval": settings.unacked_restore_interval,
        "unacked_restore_throttle": settings.unacked_restore_throttle,
    }
    app.conf.update(
        task_acks_late=settings.task_acks_late,
        task_reject_on_worker_lost=settings.task_reject_on_worker_lost,
        worker_prefetch_multiplier=settings.worker_prefetch_multiplier,
        broker_transport_options=transport,
        # The Redis caveats ask for the same visibility timeout in all three places.
        result_backend_transport_options={"visibility_timeout": settings.visibility_timeout},
        visibility_timeout=settings.visibility_timeout,
        broker_connection_retry_on_startup=True,
    )

    @app.task(name="bench.noop")  # type: ignore[untyped-decorator]
    def noop() -> None:
        return None

    @app.task(name="bench.slow")  # type: ignore[untyped-decorator]
    def slow(job: str, seconds: float, log: str) -> dict[str, int]:
        runs.record(log, job, "start")
        time.sleep(seconds)
        runs.record(log, job, "end")
        return {"pid": os.getpid()}

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description="a Celery worker for bench.compare")
    parser.add_argument("--broker", required=True)
    parser.add_argument("--backend", required=True)
    parser.add_argument("--settings", default=DEFAULTS.to_json())
    parser.add_argument("--name", default="worker")
    parser.add_argument("--queues", default="bench")
    parser.add_argument("--logfile", required=True)
    args = parser.parse_args()
    settings = Settings.from_json(args.settings)
    app = make_app(args.broker, args.backend, settings)
    app.worker_main(
        [
            "worker",
            f"--pool={settings.pool}",
            "--concurrency=1",
            f"--hostname={args.name}@bench",
            f"--queues={args.queues}",
            "--loglevel=WARNING",
            f"--logfile={args.logfile}",
        ]
    )


if __name__ == "__main__":
    main()
