"""Benchmarks of the control plane against the real local API server.

- claims: W worker processes (simulated engine) drain J jobs: claims per second, 409s per claim.
- reclaim: N leases claimed by holders that never renew: the delay from each lease's expiry
  (claim time + duration) to the moment a watcher sees the job Queued again; p50/p90/p99.
- batch_writes: one Batch of J items drained by W workers: Batch status writes in all, from
  the operator's `recall_batch_status_writes_total`; and a burst of 100 job changes within about
  a second: the Batch writes it cost.
- share: one long speech file through a Whisper worker: where the attempt's time went
  (lease writes, transcript store, media, engine), from the worker's `completed` event.

Each function starts what it needs and stops it; `run_all()` returns a dict of results.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from recall import lease
from recall.install import install_crds
from recall.kube import Kube, Written, fenced_write, load_api_client
from recall.models import (
    API_VERSION,
    BATCH_PLURAL,
    GROUP,
    JOB_PLURAL,
    VERSION,
    BatchStatus,
    Phase,
    TranscriptionJob,
)
from recall_dev import speech
from recall_dev.cluster import ControlPlane, free_port

NS = "default"


class Env:
    """A control plane and the `recall` processes started against it."""

    def __init__(self, cp: ControlPlane, workdir: Path) -> None:
        self.cp = cp
        self.workdir = workdir
        self.kube = Kube(load_api_client(cp.kubeconfig))
        self.procs: list[subprocess.Popen[bytes]] = []

    def recall(self, name: str, *args: str, env: dict[str, str] | None = None) -> Path:
        log = self.workdir / f"{name}.log"
        full = self.cp.env() | {"RECALL_LOG_FORMAT": "json"} | (env or {})
        with log.open("ab") as out:
            self.procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "recall", *args],
                    env=full,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )
        return log

    def operator(self) -> int:
        """Start the operator; returns its metrics port."""
        port = free_port()
        self.recall("operator", "operator", "--namespace", NS, "--metrics-port", str(port))
        return port

    def batch(self, name: str, items: int, **kwargs: Any) -> None:
        self.kube.custom.create_namespaced_custom_object(
            GROUP, VERSION, NS, BATCH_PLURAL, batch_manifest(name, items, **kwargs)
        )

    def simulated_workers(self, n: int, idle_exit: float = 2) -> list[Path]:
        """Start `n` simulated workers that exit after `idle_exit` idle seconds; their logs."""
        return [
            self.recall(
                f"w{i}",
                "worker",
                "--id",
                f"w{i}",
                "--engine",
                "simulated",
                "--namespace",
                NS,
                "--idle-exit",
                str(idle_exit),
            )
            for i in range(n)
        ]

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@contextmanager
def environment() -> Iterator[Env]:
    with tempfile.TemporaryDirectory(prefix="recall-bench-") as tmp:
        cp = ControlPlane(workdir=Path(tmp) / "cluster")
        cp.start()
        env = Env(cp, Path(tmp))
        try:
            install_crds(str(cp.kubeconfig))
            yield env
        finally:
            env.stop()
            cp.stop()


def metric(port: int, name: str) -> float:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        lines = r.read().decode().splitlines()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in lines
        if line.startswith(name) and not line.startswith("#")
    )


def wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.2)


def ghost_claim(kube: Kube, job: TranscriptionJob, holder: str, lease_seconds: int) -> bool:
    """Claim `job` for a holder that will never renew (a fenced write, as a worker's)."""
    token = lease.new_token()
    result = fenced_write(
        kube,
        NS,
        job.name,
        lambda j: lease.claim(
            j.status,
            dt.datetime.now(dt.UTC),
            holder,
            token,
            lease_seconds=lease_seconds,
            max_attempts=5,
        ),
        known=job,
        action="claim",
    )
    return isinstance(result, Written)


def job_manifest(name: str, *, lease_seconds: int, chunks: int, delay: float) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "TranscriptionJob",
        "metadata": {"name": name},
        "spec": {
            "source": {"url": f"file:///bench/{name}.wav"},
            "leaseDurationSeconds": lease_seconds,
            "engine": {
                "name": "simulated",
                "simulate": {"chunks": chunks, "chunkDelaySeconds": delay},
            },
        },
    }


def batch_manifest(
    name: str, items: int, *, lease_seconds: int, chunks: int, delay: float
) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "Batch",
        "metadata": {"name": name},
        "spec": {
            "items": [
                {"key": f"i{i:04d}", "source": {"url": f"file:///bench/{i}.wav"}}
                for i in range(items)
            ],
            "defaults": {
                "leaseDurationSeconds": lease_seconds,
                "engine": {
                    "name": "simulated",
                    "simulate": {"chunks": chunks, "chunkDelaySeconds": delay},
                },
            },
        },
    }


def phases(env: Env) -> dict[str, int]:
    jobs, _ = env.kube.list_jobs(NS)
    out: dict[str, int] = {}
    for j in jobs:
        out[j.status.effective_phase] = out.get(j.status.effective_phase, 0) + 1
    return out


def bench_claims(workers: int = 8, jobs: int = 200) -> dict[str, Any]:
    with environment() as env:
        for i in range(jobs):
            env.kube.create_job(NS, job_manifest(f"c{i:04d}", lease_seconds=30, chunks=1, delay=0))
        logs = env.simulated_workers(workers)
        time.sleep(0)  # workers start now; the clock starts at the first claim
        wait(lambda: phases(env).get(Phase.SUCCEEDED, 0) == jobs, 300, "all jobs to succeed")
        for p in env.procs:
            p.wait(timeout=60)
        events = [
            json.loads(line)
            for log in logs
            for line in log.read_text().splitlines()
            if line.startswith("{")
        ]
        claims = [e for e in events if e.get("event") == "claimed"]
        stops = [e for e in events if e.get("event") == "worker_stopped"]
        first = min(dt.datetime.fromisoformat(e["timestamp"]) for e in claims)
        done = max(
            dt.datetime.fromisoformat(e["timestamp"])
            for e in events
            if e.get("event") == "completed"
        )
        seconds = (done - first).total_seconds()
        conflicts = sum(e["claim_conflicts"] for e in stops)
        return {
            "workers": workers,
            "jobs": jobs,
            "seconds": round(seconds, 2),
            "claims_per_second": round(jobs / seconds, 1),
            "conflicts_per_claim": round(conflicts / jobs, 3),
        }


def bench_reclaim(leases: int = 60, lease_seconds: int = 2) -> dict[str, Any]:
    """Claims `leases` jobs of one Batch as ghosts that never renew; measures the reclaim delay."""
    with environment() as env:
        port = env.operator()
        env.batch("ghosts", leases, lease_seconds=lease_seconds, chunks=1, delay=0)
        wait(lambda: phases(env).get(Phase.QUEUED, 0) == leases, 60, "fan-out")
        time.sleep(1)
        expiry: dict[str, float] = {}
        requeued: dict[str, float] = {}
        jobs, rv = env.kube.list_jobs(NS)
        stop = threading.Event()

        def watcher() -> None:
            for _kind, obj in env.kube.watch_jobs(NS, rv, timeout_seconds=120):
                status = obj.get("status", {})
                name = obj["metadata"]["name"]
                if status.get("expiredLeases") == 1 and name not in requeued:
                    requeued[name] = time.monotonic()
                if stop.is_set() or len(requeued) == leases:
                    return

        thread = threading.Thread(target=watcher, daemon=True)
        thread.start()
        for i, job in enumerate(jobs):
            assert ghost_claim(env.kube, job, f"ghost-{i}", lease_seconds)
            expiry[job.name] = time.monotonic() + lease_seconds
            time.sleep(0.05)  # spread the expiries so they do not all land in one tick
        thread.join(timeout=60)
        stop.set()
        delays = sorted(requeued[n] - expiry[n] for n in requeued)
        q = statistics.quantiles(delays, n=100, method="inclusive")
        return {
            "expiries": len(delays),
            "lease_seconds": lease_seconds,
            "p50": round(statistics.median(delays), 3),
            "p90": round(q[89], 3),
            "p99": round(q[98], 3),
            "max": round(delays[-1], 3),
            "operator_histogram_count": metric(port, "recall_reclaim_delay_seconds_count"),
        }


def bench_batch_writes(items: int = 200, workers: int = 8) -> dict[str, Any]:
    with environment() as env:
        port = env.operator()
        env.batch("big", items, lease_seconds=30, chunks=2, delay=0.01)

        def complete() -> bool:
            raw = env.kube.get_batch(NS, "big") or {}
            return BatchStatus.model_validate(raw.get("status", {})).complete

        wait(lambda: phases(env).get(Phase.QUEUED, 0) == items, 120, "fan-out")
        time.sleep(2)
        before = metric(port, "recall_batch_status_writes_total")
        started = time.monotonic()
        env.simulated_workers(workers)
        wait(complete, 300, "the batch to complete")
        drained = time.monotonic() - started
        writes = metric(port, "recall_batch_status_writes_total") - before
        # Each job changed state at least 4 times (claim, renewals, complete).
        return {
            "items": items,
            "workers": workers,
            "seconds": round(drained, 1),
            "batch_status_writes": int(writes),
            "writes_per_item": round(writes / items, 2),
        }


def bench_burst(changes: int = 100) -> dict[str, Any]:
    """100 jobs of one Batch claimed within about a second: how many Batch writes that costs."""
    with environment() as env:
        port = env.operator()
        env.batch("burst", changes, lease_seconds=300, chunks=1, delay=0)
        wait(lambda: phases(env).get(Phase.QUEUED, 0) == changes, 60, "fan-out")
        time.sleep(3)
        before = metric(port, "recall_batch_status_writes_total")
        jobs, _ = env.kube.list_jobs(NS)
        started = time.monotonic()
        threads = []
        for part in range(10):

            def claim_part(p: int = part) -> None:
                kube = Kube(load_api_client(env.cp.kubeconfig))
                for job in jobs[p::10]:
                    ghost_claim(kube, job, "burst", 300)

            threads.append(threading.Thread(target=claim_part))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        burst = time.monotonic() - started

        def projected() -> bool:
            raw = env.kube.get_batch(NS, "burst") or {}
            return raw.get("status", {}).get("counts", {}).get("transcribing") == changes

        wait(projected, 30, "the projection of the burst")
        time.sleep(2)
        return {
            "job_changes": changes,
            "burst_seconds": round(burst, 2),
            "batch_status_writes": int(metric(port, "recall_batch_status_writes_total") - before),
        }


def bench_share(seconds: float = 300.0) -> dict[str, Any]:
    """Where the time of one attempt on a `seconds`-long speech file goes."""
    with environment() as env:
        media = env.workdir / "long.wav"
        speech.speak_for(seconds, media)
        env.kube.custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            NS,
            JOB_PLURAL,
            {
                "apiVersion": API_VERSION,
                "kind": "TranscriptionJob",
                "metadata": {"name": "long"},
                "spec": {
                    "source": {"url": media.as_uri()},
                    "language": "en",
                    "engine": {"name": "whisper"},
                    "leaseDurationSeconds": 30,
                },
            },
        )
        log = env.recall(
            "w", "worker", "--id", "w", "--engine", "whisper", "--namespace", NS, "--max-jobs", "1"
        )
        env.procs[-1].wait(timeout=seconds * 2)
        events = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
        claimed = next(e for e in events if e.get("event") == "claimed")
        done = next(e for e in events if e.get("event") == "completed")
        total = (
            dt.datetime.fromisoformat(done["timestamp"])
            - dt.datetime.fromisoformat(claimed["timestamp"])
        ).total_seconds()
        control = done["lease_seconds"] + done["store_seconds"]
        return {
            "audio_seconds": done["audio_seconds"],
            "attempt_seconds": round(total, 2),
            "engine_seconds": done["engine_seconds"],
            "media_seconds": done["media_seconds"],
            "lease_write_seconds": done["lease_seconds"],
            "lease_writes": done["lease_writes"],
            "store_seconds": done["store_seconds"],
            "control_plane_share": round(control / total, 4),
        }


BENCHES = {
    "claims": bench_claims,
    "reclaim": bench_reclaim,
    "batch_writes": bench_batch_writes,
    "burst": bench_burst,
    "share": bench_share,
}
