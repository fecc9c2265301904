"""Slots against one lease a process: N leases held by one worker process, or by N processes.

The simulated engine at GPU speed (600× real time: 50 ms a 30-second chunk, a call that sleeps,
as a GPU call leaves the CPU free). The same Batch is drained by `n` worker processes of one
slot and by one worker process of `n` slots; per run: audio-seconds per second, the workers'
CPU seconds and resident memory (summed over their processes, from /proc), and the API writes
per job (the API server's count of mutating requests). On a GPU the slots also share one model
in the device's memory where `n` processes load `n` copies; that part only a GPU can show.

`measure(env)` returns the figures; docs/benchmarks.md shows them (`bench.report`).
"""

from __future__ import annotations

import time
from typing import Any

from bench.harness import Env, simulated_batch, usage, wait
from bench.scale import MUTATING, _complete

CHUNK_SECONDS = 30.0
DELAY = CHUNK_SECONDS / 600.0


def run(env: Env, *, processes: int, slots: int, jobs: int, chunks: int) -> dict[str, Any]:
    """`processes` workers of `slots` slots each drain a Batch of `jobs` jobs."""
    ns = env.namespace()
    op = f"operator-{ns}"
    env.operator(ns, name=op)
    names = env.workers(ns, processes, prefix=f"{ns}-w", idle_exit=3600, slots=str(slots))
    wait(
        lambda: (
            len(env.store.list_leases(ns, "app.kubernetes.io/component=worker").items) == processes
        ),
        300,
        "the workers to register",
    )
    time.sleep(2)
    pids = [env.procs[n].pid for n in names]
    cpu_before = sum(usage(p).cpu_seconds for p in pids)
    before = env.api_counts()
    started = time.time()
    env.store.create_batch(ns, simulated_batch("s", jobs, chunks=chunks, delay=DELAY, lease=30))
    wait(lambda: _complete(env, ns, "s"), 1800, "the Batch to complete", every=0.5)
    seconds = time.time() - started
    after = env.api_counts()
    used = [usage(p) for p in pids]
    env.stop([*names, op])
    writes = sum(n for (verb, _r, _s), n in (after - before).items() if verb in MUTATING)
    expired = sum(j.status.expired_leases for j in env.jobs(ns))
    return {
        "processes": processes,
        "slots": slots,
        "jobs": jobs,
        "seconds": round(seconds, 1),
        "audio_seconds_per_second": round(jobs * chunks * CHUNK_SECONDS / seconds, 1),
        "worker_cpu_seconds": round(sum(u.cpu_seconds for u in used) - cpu_before, 1),
        "worker_rss_mib": round(sum(u.rss_mib for u in used), 1),
        "api_writes_per_job": round(writes / jobs, 2),
        "expired_leases": expired,
    }


def measure(env: Env, quick: bool = False) -> dict[str, Any]:
    n = 4 if quick else 8
    jobs, chunks = (4 * n, 20) if quick else (6 * n, 20)
    return {
        "leases": n,
        "engine": "simulated, 600× real time (50 ms a 30-second chunk)",
        "chunks_per_job": chunks,
        "runs": [
            run(env, processes=n, slots=1, jobs=jobs, chunks=chunks),
            run(env, processes=1, slots=n, jobs=jobs, chunks=chunks),
        ],
    }


def markdown(section: dict[str, Any]) -> list[str]:
    lines = [
        "## Slots against one lease a process",
        "",
        f"{section['leases']} leases at once, held by {section['leases']} worker processes of one "
        f"slot or by one process of {section['leases']} slots; {section['engine']}, "
        f"{section['chunks_per_job']} chunks a job. Worker CPU and memory are summed over the "
        "worker processes; API writes are the API server's mutating requests per job.",
        "",
        "| processes × slots | jobs | seconds | audio-s/s | worker CPU s | worker RSS (MiB) "
        "| API writes/job | expired leases |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in section["runs"]:
        lines.append(
            f"| {r['processes']} × {r['slots']} | {r['jobs']} | {r['seconds']} | "
            f"{r['audio_seconds_per_second']} | {r['worker_cpu_seconds']} | {r['worker_rss_mib']} "
            f"| {r['api_writes_per_job']} | {r['expired_leases']} |"
        )
    return [*lines, ""]
