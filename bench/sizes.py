"""recall at real sizes: a 100,000-item Batch, reclaims among 10,000 jobs, the largest object.

- `big_batch`: one Batch of N items (from item lists) fanned out and drained by W simulated
  workers: how long, the operator's resident memory and CPU with N jobs in its cache, the
  Batch's size, and the largest object of the namespace.
- `reclaim_delay`: E leases (never renewed) expire among J jobs; the delay from each lease's
  expiry (claim time + duration, on the benchmark's clock) to a watch seeing the job Queued
  again, and the operator's own histogram of it.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
import threading
import time
from typing import Any

from bench.harness import Env, list_batch, usage, wait
from recall.fencing import fenced_write
from recall.kube import Selector
from recall.protocol import lease
from recall.protocol.lease import Budget
from recall.resources import Phase, TranscriptionJob


def _size(obj: Any) -> int:
    return len(json.dumps(obj, separators=(",", ":")))


def largest_objects(env: Env, namespace: str) -> dict[str, int]:
    """The size in bytes (JSON) of the largest Batch, TranscriptionJob and ConfigMap."""
    out = {"batch": 0, "transcriptionjob": 0, "configmap": 0}
    for b in env.store.custom.list_namespaced_custom_object(
        "recall.dev", "v1alpha1", namespace, "batches"
    )["items"]:
        out["batch"] = max(out["batch"], _size(b))
    page = env.store.list_jobs(namespace, limit=2000)
    while True:
        for j in page.items:
            out["transcriptionjob"] = max(out["transcriptionjob"], _size(j))
        if not page.next:
            break
        page = env.store.list_jobs(namespace, limit=2000, continue_from=page.next)
    cms = env.store.core.list_namespaced_config_map(namespace)
    for cm in env.store.api.sanitize_for_serialization(cms.items):
        out["configmap"] = max(out["configmap"], _size(cm))
    return out


def big_batch(env: Env, items: int, *, workers: int) -> dict[str, Any]:
    ns = env.namespace()
    op = f"operator-{ns}"
    env.operator(ns, name=op)
    pid = env.procs[op].pid
    names = env.workers(ns, workers, prefix=f"{ns}-w", idle_exit=3600)
    created = time.time()
    list_batch(env, ns, "big", items)

    def count(phase: Phase | None = None) -> int:
        b = env.store.get_batch(ns, "big")
        c = b.status.counts if b else None
        if c is None:
            return 0
        return c.completed if phase is Phase.SUCCEEDED else c.total

    peak_rss = 0.0
    half: dict[str, Any] = {}

    def done() -> bool:
        nonlocal peak_rss
        u = usage(pid)
        peak_rss = max(peak_rss, u.rss_mib)
        c = count(Phase.SUCCEEDED)
        if not half and c >= items // 2:
            half.update(at_s=round(time.time() - created, 1), operator_cpu_s=u.cpu_seconds)
        b = env.store.get_batch(ns, "big")
        return b is not None and b.status.complete

    wait(done, 4 * 3600, "the big Batch to complete", every=2.0)
    seconds = time.time() - created
    u = usage(pid)
    sizes = largest_objects(env, ns)
    env.stop([*names, op])
    return {
        "items": items,
        "workers": workers,
        "seconds": round(seconds, 1),
        "jobs_per_second": round(items / seconds, 1),
        "operator_rss_mib_peak": peak_rss,
        "operator_rss_mib_end": u.rss_mib,
        "operator_cpu_seconds": u.cpu_seconds,
        "operator_cpu_share": round(u.cpu_seconds / seconds, 3),
        "halfway": half,
        "largest_object_bytes": sizes,
    }


def reclaim_delay(
    env: Env, *, jobs: int = 10_000, expiries: int = 240, lease_seconds: int = 3
) -> dict[str, Any]:
    ns = env.namespace()
    op = f"operator-{ns}"
    port = env.operator(ns, name=op, dispatch="false")
    list_batch(env, ns, "r", jobs)

    def fanned_out() -> bool:
        b = env.store.get_batch(ns, "r")
        return b is not None and any(
            c.type == "JobsCreated" and c.status == "True" for c in b.status.conditions
        )

    wait(fanned_out, 1800, "the fan-out", every=1.0)
    victims = [
        TranscriptionJob.from_api(o)
        for o in env.store.list_jobs(
            ns, Selector(fields="status.phase=Queued"), limit=expiries
        ).items
    ]
    expiry: dict[str, float] = {}
    requeued: dict[str, float] = {}
    rv = env.store.list_jobs(ns, limit=1).resource_version
    stop = threading.Event()

    def watcher() -> None:
        for event in env.store.watch_jobs(ns, rv):
            status = event.object.get("status") or {}
            name = event.object["metadata"]["name"]
            if status.get("expiredLeases") == 1 and name not in requeued:
                requeued[name] = time.time()
            if stop.is_set() or len(requeued) == len(victims):
                return

    thread = threading.Thread(target=watcher, daemon=True)
    thread.start()
    for i, job in enumerate(victims):
        token = lease.new_token()
        sent = time.time()
        result = fenced_write(
            env.store,
            ns,
            job.name,
            lambda j, t=token, w=f"ghost-{i}": lease.claim(  # type: ignore[misc]
                j.status,
                dt.datetime.now(dt.UTC),
                w,
                t,
                lease_seconds=lease_seconds,
                budget=Budget(5, 10),
            ),
            action="claim",
            known=job,
        )
        if result.applied:
            expiry[job.name] = sent + lease_seconds
        time.sleep(0.02)  # spread the expiries over several ticks
    thread.join(timeout=lease_seconds + 120)
    stop.set()
    delays = sorted(requeued[n] - expiry[n] for n in requeued if n in expiry)
    q = statistics.quantiles(delays, n=100, method="inclusive")
    from urllib.request import urlopen

    with urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    count = sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("recall_reclaim_delay_seconds_count")
    )
    env.stop([op])
    return {
        "jobs_in_system": jobs,
        "expiries": len(delays),
        "lease_seconds": lease_seconds,
        "p50_s": round(statistics.median(delays), 3),
        "p99_s": round(q[98], 3),
        "max_s": round(delays[-1], 3),
        "operator_reclaims_counted": count,
        "delays": [round(d, 3) for d in delays],
    }
