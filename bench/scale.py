"""How recall scales on this machine, measured against the API server's own limit.

- `write_limit`: raw fenced `/status` writes per second by N client processes (`bench.writer`),
  the ceiling every protocol write shares.
- `throughput`: W simulated workers (zero-work jobs) drain a Batch: jobs per second, wasted
  claims (a 409 or a refused claim) per successful claim, and the API writes per job by kind,
  counted from the API server's `apiserver_request_total` (not estimated).
- `fair_share`: a 10-item Batch submitted behind a big one: how soon it starts and how long it
  takes, against the same Batch alone; and a higher-priority Batch going first.

Each function takes an `Env` (`bench.harness`) and returns a dict of figures.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time
from collections import Counter
from typing import Any

from bench.harness import Env, RequestKey, list_batch, simulated_batch, wait
from recall.resources import API_VERSION, Phase
from recall_dev.procs import die_with_parent

MUTATING = ("POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION")


def _job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "TranscriptionJob",
        "metadata": {"name": name},
        "spec": {"source": {"url": f"file:///bench/{name}.wav"}, "engine": {"name": "simulated"}},
    }


def write_limit(
    env: Env, clients: tuple[int, ...] = (1, 4, 16), seconds: float = 15.0, per_client: int = 4
) -> dict[str, Any]:
    """Fenced status writes per second by N processes, each renewing its own jobs."""
    out: dict[int, float] = {}
    for n in clients:
        ns = env.namespace()
        names = [[f"c{c}-{j}" for j in range(per_client)] for c in range(n)]
        for group in names:
            for name in group:
                env.store.create_job(ns, _job(name))
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "bench.writer", ns, str(seconds), *group],
                env=env.cp.env(),
                stdout=subprocess.PIPE,
                text=True,
                preexec_fn=die_with_parent,
            )
            for group in names
        ]
        results = [json.loads(p.communicate(timeout=seconds + 120)[0]) for p in procs]
        out[n] = round(sum(r["writes"] for r in results) / max(r["seconds"] for r in results), 1)
    return {"writes_per_second": out, "limit": max(out.values())}


def _writes(before: Counter[RequestKey], after: Counter[RequestKey]) -> Counter[str]:
    out: Counter[str] = Counter()
    for (verb, resource, sub), n in (after - before).items():
        if verb in MUTATING:
            out[f"{verb} {resource}{'/' + sub if sub else ''}"] += n
    return out


def _stamp(event: dict[str, Any]) -> float:
    return dt.datetime.fromisoformat(str(event["timestamp"])).timestamp()


def _complete(env: Env, ns: str, name: str) -> bool:
    batch = env.store.get_batch(ns, name)
    return batch is not None and batch.status.complete


def throughput(
    env: Env,
    workers: int,
    *,
    jobs: int,
    limit: float,
    dispatch: str = "offers",
) -> dict[str, Any]:
    """`workers` simulated workers drain a `jobs`-item Batch of zero-work jobs."""
    ns = env.namespace()
    op = f"operator-{ns}"
    env.operator(ns, name=op)
    names = env.workers(ns, workers, prefix=f"{ns}-w", idle_exit=3600, dispatch=dispatch)
    wait(
        lambda: (
            len(env.store.list_leases(ns, "app.kubernetes.io/component=worker").items) == workers
            or dispatch != "offers"
        ),
        300,
        "the workers to register",
    )
    time.sleep(2 if dispatch == "offers" else 10)  # the queue-watch workers list and settle
    before = env.api_counts()
    started = time.time()
    if jobs <= 1000:
        env.store.create_batch(ns, simulated_batch("t", jobs))
    else:
        list_batch(env, ns, "t", jobs)
    wait(lambda: _complete(env, ns, "t"), 600 + jobs, "the Batch to complete", every=0.5)
    finished = time.time()
    after = env.api_counts()
    env.stop([*names, op])  # SIGTERM: each worker logs what it did as it stops
    events = [e for n in names for e in env.events(n)]
    done = [e for e in events if e.get("event") == "completed"]
    last = max(_stamp(e) for e in done)
    stops = [e for e in events if e.get("event") == "worker_stopped"]
    claims = sum(int(e["claims"]) for e in stops)
    conflicts = sum(int(e["claim_conflicts"]) for e in stops)
    refused = sum(1 for e in events if e.get("event") == "claim_refused")
    writes = _writes(before, after)
    per_job = sum(writes.values()) / jobs
    seconds = min(finished, last) - started
    rate = jobs / seconds
    return {
        "workers": workers,
        "dispatch": dispatch,
        "jobs": jobs,
        "seconds": round(seconds, 1),
        "jobs_per_second": round(rate, 1),
        "claims": claims,
        "wasted_claims_per_claim": round((conflicts + refused) / max(1, claims), 3),
        "api_writes_per_job": round(per_job, 2),
        "writes_by_kind_per_job": {k: round(v / jobs, 2) for k, v in writes.most_common()},
        "ratio_to_limit": round(rate / (limit / per_job), 2),
    }


def fair_share(env: Env, *, workers: int = 8, big: int = 2000, small: int = 10) -> dict[str, Any]:
    """A small Batch behind a big one, against the small one alone; a priority Batch first.

    Jobs take 1 s each (simulated), so a worker frees up every second or so.
    """
    ns = env.namespace()
    op = f"operator-{ns}"
    env.operator(ns, name=op)
    names = env.workers(ns, workers, prefix=f"{ns}-f", idle_exit=3600)
    wait(
        lambda: (
            len(env.store.list_leases(ns, "app.kubernetes.io/component=worker").items) == workers
        ),
        300,
        "the workers to register",
    )

    def run_small(name: str, **defaults: Any) -> tuple[float, float]:
        created = time.time()
        env.store.create_batch(ns, simulated_batch(name, small, delay=1.0, **defaults))
        wait(lambda: _complete(env, ns, name), 600, f"{name} to complete")
        jobs = [j for j in env.jobs(ns) if j.spec.batch_ref == name]
        first = min(j.status.started_at.timestamp() for j in jobs if j.status.started_at)
        return round(first - created, 2), round(time.time() - created, 2)

    alone_start, alone_total = run_small("alone")
    list_batch(env, ns, "big", big, delay=1.0)
    wait(
        lambda: sum(j.status.phase == Phase.LEASED for j in env.jobs(ns)) >= workers,
        300,
        "the big Batch to occupy every worker",
    )
    behind_start, behind_total = run_small("behind")
    # Priority wins over fair share: both submitted at once, the urgent items go first.
    env.store.create_batch(ns, simulated_batch("plain", small, delay=1.0))
    env.store.create_batch(ns, simulated_batch("urgent", small, delay=1.0, priority=10))
    wait(lambda: _complete(env, ns, "urgent"), 600, "urgent to complete")
    jobs = env.jobs(ns)
    urgent_last = max(
        j.status.started_at.timestamp()
        for j in jobs
        if j.spec.batch_ref == "urgent" and j.status.started_at
    )
    plain_before = sum(
        1
        for j in jobs
        if j.spec.batch_ref == "plain"
        and j.status.started_at
        and j.status.started_at.timestamp() < urgent_last
    )
    env.stop([*names, op])
    return {
        "workers": workers,
        "big_batch_items": big,
        "small_batch_items": small,
        "job_seconds": 1.0,
        "alone": {"first_claim_s": alone_start, "all_done_s": alone_total},
        "behind_big": {"first_claim_s": behind_start, "all_done_s": behind_total},
        "plain_items_started_before_the_last_urgent_one": plain_before,
    }
