"""Celery on Redis: the figures of `bench.compare`, measured on a real server.

`figures()` starts redis-server (its own directory, loopback port; database 0 is the broker,
database 1 the result backend), runs the throughput, kill and zombie scenarios with worker
processes (`python -m bench.compare.celery_app`), and stops and removes everything.

Counted from the result backend: a task is done when its `celery-task-meta-<id>` key says
SUCCESS, and the drain time runs from the moment the workers were told to consume the queue
(every task already in it) to the latest `date_done` among the results.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import redis as redis_client

from bench.compare import scenarios, servers
from bench.compare.celery_app import DEFAULTS, Settings, best, make_app
from bench.compare.records import celery_meta, jobs_per_second
from bench.compare.report import Figures

SOURCES = [
    "https://docs.celeryq.dev/en/stable/userguide/configuration.html",
    "https://docs.celeryq.dev/en/stable/getting-started/backends-and-brokers/redis.html",
    "https://docs.celeryq.dev/projects/kombu/en/stable/reference/kombu.transport.redis.html",
]
GATE = "gate"  # a queue nothing is sent to: workers wait on it until the jobs are all queued
QUEUE = "bench"
META = "celery-task-meta-"
PREFORK_CHILD = "best, prefork pool child killed"


class Cluster:
    """redis-server, and the Celery workers started against it."""

    def __init__(self, server: servers.Redis, children: servers.Children, workdir: Path):
        self.server = server
        self.children = children
        self.workdir = workdir
        self.runlog = workdir / "runs.jsonl"
        self.workers: list[subprocess.Popen[bytes]] = []
        self.hostnames: list[str] = []
        self._started = 0
        self._settings = DEFAULTS
        self.results = redis_client.Redis(host=server.host, port=server.port, db=1)

    def close(self) -> None:
        self.results.close()

    def reset(self) -> None:
        self.stop_workers()
        with redis_client.Redis(host=self.server.host, port=self.server.port) as client:
            client.flushall()

    def start_workers(
        self, count: int, settings: str, queues: str = QUEUE
    ) -> list[subprocess.Popen[bytes]]:
        """Start `count` workers; return once each answers a ping."""
        self._settings = Settings.from_json(settings)
        procs, names = [], []
        for _ in range(count):
            self._started += 1
            name = f"w{self._started}"
            procs.append(
                self.children.start(
                    [
                        sys.executable, "-m", "bench.compare.celery_app",
                        "--broker", self.server.url(0),
                        "--backend", self.server.url(1),
                        "--settings", settings,
                        "--name", name,
                        "--queues", queues,
                        "--logfile", str(self.workdir / f"worker-{name}.log"),
                    ],
                    log=self.workdir / f"worker-{name}.out",
                    env=servers.python_env(),
                )
            )  # fmt: skip
            names.append(f"{name}@bench")
        self.workers += procs
        self.hostnames += names
        with self.client() as app:

            def ready() -> bool | None:
                for proc in procs:
                    if proc.poll() is not None:
                        raise RuntimeError(f"a Celery worker exited with {proc.returncode}")
                replies = app.control.ping(destination=names, timeout=0.5)
                answered = {host for reply in replies for host in reply}
                return True if answered >= set(names) else None

            scenarios.wait_for(ready, 120, f"{count} Celery workers ready", step=0.2)
        return procs

    def stop_workers(self) -> None:
        for proc in self.workers:
            self.children.stop(proc, grace=10.0)
        self.workers, self.hostnames = [], []

    @contextlib.contextmanager
    def client(self) -> Any:
        app = make_app(self.server.url(0), self.server.url(1), self._settings)
        try:
            yield app
        finally:
            app.close()

    def enqueue_slow(self, job: str, seconds: float) -> None:
        with self.client() as app:
            app.send_task(
                "bench.slow",
                kwargs={"job": job, "seconds": seconds, "log": str(self.runlog)},
                task_id=job,
                queue=QUEUE,
            )

    def snapshot(self, job: str) -> scenarios.Snapshot:
        raw = self.results.get(META + job)
        if raw is None:
            return scenarios.Snapshot(False, "absent", "result backend: no result")
        meta = celery_meta(raw)
        return scenarios.Snapshot(
            done=meta.status == "SUCCESS",
            fingerprint=raw if isinstance(raw, str) else raw.decode(errors="replace"),
            text=f"result backend status={meta.status} result={json_short(meta.result)}",
        )

    def drain(self, jobs: int, workers: int) -> float:
        """jobs/s of `workers` workers draining `jobs` zero-work tasks, from the backend."""
        self.reset()
        self.start_workers(workers, DEFAULTS.to_json(), queues=GATE)
        try:
            ids = [str(uuid.uuid4()) for _ in range(jobs)]
            with self.client() as app:
                with app.producer_or_acquire() as producer:
                    for task_id in ids:
                        app.send_task("bench.noop", task_id=task_id, queue=QUEUE, producer=producer)
                started_at = time.time()
                app.control.add_consumer(QUEUE, destination=self.hostnames, reply=True, timeout=5)
            keys = [META + task_id for task_id in ids]

            def drained() -> float | None:
                done: list[float] = []
                for first in range(0, len(keys), 1000):
                    for raw in self.results.mget(keys[first : first + 1000]):
                        if raw is None:
                            return None
                        meta = celery_meta(raw)
                        if meta.status == "SUCCESS" and meta.date_done is not None:
                            done.append(meta.date_done)
                return max(done) if len(done) == jobs else None

            last = scenarios.wait_for(drained, max(120.0, jobs / 5), "drain", step=0.2)
            return jobs_per_second(jobs, started_at, last)
        finally:
            self.stop_workers()


def json_short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def figures(
    *,
    jobs: int = 2000,
    workers: Iterable[int] = (1, 4, 16),
    kill_wait: float = 30.0,
    job_seconds: float = 4.0,
    workdir: Path | None = None,
) -> Figures:
    """Celery's figures (see `bench.compare`); everything started is stopped."""
    counts = list(workers)
    fastest = best(job_seconds)
    with contextlib.ExitStack() as stack:
        base = Path(tempfile.mkdtemp(prefix="recall-compare-celery-", dir=workdir))
        stack.callback(shutil.rmtree, base, ignore_errors=True)
        children = servers.Children()
        stack.callback(children.stop_all)
        server = stack.enter_context(servers.redis(children, base))
        cluster = Cluster(server, children, base)
        stack.callback(cluster.close)
        stack.callback(cluster.stop_workers)

        rates = {w: cluster.drain(jobs, w) for w in counts}
        kill = {
            name: scenarios.kill_to_rerun(
                cluster, s.to_json(), job=f"kill-{name}", job_seconds=job_seconds, wait=kill_wait
            )
            for name, s in (("defaults", DEFAULTS), ("best", fastest))
        }
        # Celery's own pool, where task_reject_on_worker_lost acts: only the child dies.
        kill[PREFORK_CHILD] = scenarios.kill_to_rerun(
            cluster,
            replace(fastest, pool="prefork").to_json(),
            job="kill-prefork-child",
            job_seconds=job_seconds,
            wait=kill_wait,
            job_process_only=True,
        )
        zombies = [
            scenarios.zombie(
                cluster,
                fastest.to_json(),
                job=f"zombie-{resumed}",
                job_seconds=job_seconds,
                wait=kill_wait,
                resumed=resumed,
            )
            for resumed in ("during_rerun", "after_rerun")
        ]

    return Figures(
        system=f"Celery {importlib.metadata.version('celery')} (Kombu "
        f"{importlib.metadata.version('kombu')}) on Redis {server.version}",
        jobs=jobs,
        jobs_per_second=rates,
        kill_to_rerun_seconds=kill,
        kill_wait_seconds=kill_wait,
        documented_rerun={
            "defaults": "never (acknowledged before it runs: task_acks_late disabled)",
            "best": f"visibility_timeout ({fastest.visibility_timeout} s) after delivery + up "
            f"to {fastest.unacked_restore_interval * fastest.unacked_restore_throttle} s sweep",
            PREFORK_CHILD: "at once: task_reject_on_worker_lost re-queues it when the child dies",
        },
        zombie=zombies,
        zombie_result_accepted=zombies[0]["accepted"],
        settings={
            "throughput": asdict(DEFAULTS),
            "defaults": asdict(DEFAULTS),
            "best": asdict(fastest),
            PREFORK_CHILD: asdict(replace(fastest, pool="prefork")),
        },
        sources=SOURCES,
        notes=[
            "each worker is one process (--pool=solo) running one task at a time; tasks are "
            "queued while the workers consume another queue, then all are told to consume",
            "results are stored in Redis (database 1), which is what the figures are counted "
            "from; Redis runs without snapshots or AOF",
            "with task_acks_late and the default 1 h visibility timeout a killed worker's task "
            "would run again after about an hour (plus a sweep of up to 100 s)",
            "in the prefork case the worker is a parent and one child (concurrency 1) and only "
            "the child running the task is killed: the parent sees it die; a whole worker lost "
            "(its pod or node) is the solo case",
            "the zombie scenarios use the best settings (at the defaults no re-run happens)",
        ],
    )


if __name__ == "__main__":  # a quick look: python -m bench.compare.celery_bench
    import json

    began = time.monotonic()
    print(json.dumps(figures(jobs=500, workers=(1, 4)), indent=2))
    print(f"{time.monotonic() - began:.0f} s", file=sys.stderr)
