"""recall's own figures in the shape of the comparison (`bench.compare.report.Figures`), so the
three systems sit in one table: jobs/s by workers, kill -9 → running again (at the default
lease and at a short one), and whether a frozen worker's late result is accepted."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from bench.compare.report import Figures, Zombie
from bench.harness import Env, simulated_batch, wait
from recall.resources import Phase


def _kill_to_rerun(env: Env, lease: int, wait_s: float) -> float | None:
    ns = env.namespace()
    op = f"operator-{ns}"
    env.operator(ns, name=op)
    a, b = env.workers(ns, 2, prefix=f"{ns}-k", idle_exit=3600)
    env.store.create_batch(ns, simulated_batch("k", 1, lease=lease, chunks=8, delay=0.5))
    job_name = "k-i00000"

    def held() -> str | None:
        job = env.store.get_job(ns, job_name)
        return job.status.lease.holder if job and job.status.lease else None

    wait(lambda: held() is not None, 120, "a claim")
    victim = held()
    time.sleep(0.5)
    killed = time.time()
    os.kill(env.procs[str(victim)].pid, signal.SIGKILL)
    rerun: float | None = None
    deadline = time.time() + wait_s
    while time.time() < deadline:
        job = env.store.get_job(ns, job_name)
        if job and job.status.attempts >= 2 and job.status.lease is not None:
            rerun = time.time() - killed
            break
        time.sleep(0.05)
    env.stop([a, b, op])
    return None if rerun is None else round(rerun, 2)


def _zombie(env: Env) -> Zombie:
    ns = env.namespace()
    op = f"operator-{ns}"
    env.operator(ns, name=op)
    (a,) = env.workers(ns, 1, prefix=f"{ns}-z", idle_exit=3600)
    env.store.create_batch(ns, simulated_batch("z", 1, lease=3, chunks=6, delay=0.5))
    job_name = "z-i00000"
    wait(
        lambda: (j := env.store.get_job(ns, job_name)) is not None and j.status.lease is not None,
        120,
        "a claim",
    )
    os.kill(env.procs[a].pid, signal.SIGSTOP)
    (b,) = env.workers(ns, 1, prefix=f"{ns}-y", idle_exit=3600)
    wait(
        lambda: (
            (j := env.store.get_job(ns, job_name)) is not None and j.status.phase == Phase.SUCCEEDED
        ),
        120,
        "the re-run to complete",
    )
    os.kill(env.procs[a].pid, signal.SIGCONT)
    time.sleep(5)
    job = env.store.get_job(ns, job_name)
    assert job is not None and job.status.result is not None
    lost = [e for e in env.events(a) if e.get("event") == "lease_lost"]
    completed = [e for e in env.events(a) if e.get("event") == "completed"]
    env.stop([a, b, op])
    accepted = bool(completed) or job.status.result.worker == a
    return Zombie(
        resumed="after_rerun",
        accepted=accepted,
        evidence=(
            f"result from {job.status.result.worker} attempt {job.status.result.attempt}; the "
            f"frozen worker's write was refused ({lost[0]['reason'] if lost else 'no write'})"
        ),
    )


def figures(env: Env, jobs_per_second: dict[int, float], *, wait_s: float = 30.0) -> Figures:
    defaults = _kill_to_rerun(env, 120, wait_s)
    best = _kill_to_rerun(env, 4, wait_s)
    zombie = _zombie(env)
    settings: dict[str, dict[str, Any]] = {
        "throughput": {"dispatch": "offers", "tick_seconds": 0.5},
        "defaults": {"leaseDurationSeconds": 120},
        "best": {"leaseDurationSeconds": 4, "renew deadline": "2/3 of the lease"},
    }
    return Figures(
        system="recall (kube-apiserver v1.37 + etcd v3.6, no fsync)",
        jobs=0,
        jobs_per_second=jobs_per_second,
        kill_to_rerun_seconds={"defaults": defaults, "best": best},
        kill_wait_seconds=wait_s,
        documented_rerun={
            "defaults": "the lease (120 s) after the last renewal, then within one tick",
            "best": "the lease (4 s) after the last renewal, then within one tick",
        },
        zombie=[zombie],
        zombie_result_accepted=zombie["accepted"],
        settings=settings,
        sources=["docs/concepts.md: How a job is rented"],
        notes=["a graceful stop (SIGTERM) releases the job at once"],
    )
