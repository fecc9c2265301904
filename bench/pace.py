"""The engine sets the pace: what the control plane costs a job as the engine gets faster, and
what a fleet of fast workers asks of the API server.

- `single`: one worker, one job at a time, at engine speeds of 10×, 100×, 600× real time and
  at zero engine time (the simulated engine sleeps a chunk's share of the speed: 3 s, 0.3 s,
  50 ms, 0 for a 30-second chunk). Per job: its wall time on the worker (claim to complete),
  the engine's own time, the control plane's share of the wall time (everything that is not the
  engine: claim, media, waits for the store or a lease, the transcript, complete), the worker's
  lease writes and the API server's own count of mutating requests (apiserver_request_total:
  claims, renewals, complete, the operator's offers and publish, Batch status, registrations),
  per job and per worker-second.
- `fleet`: W workers at 600× drain a Batch: API writes per second, 409s and 429s (the API
  server's counts by code), expired leases, and audio-seconds per second, against the same W
  processes making the same engine calls with no control plane at all (the limit of this
  machine for that engine).

Each function takes an `Env` (`bench.harness`) and returns a dict of figures.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
import textwrap
import time
from collections import Counter
from typing import Any

from bench.harness import Env, simulated_batch, wait
from bench.scale import MUTATING, _complete, _stamp, _writes
from recall_dev.procs import die_with_parent

CHUNK_SECONDS = 30.0
SPEEDS: tuple[float | None, ...] = (10.0, 100.0, 600.0, None)  # None: no engine time at all
_CODES = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")


def _codes(text: str) -> Counter[tuple[str, str]]:
    """apiserver_request_total by (verb, code)."""
    out: Counter[tuple[str, str]] = Counter()
    for line in text.splitlines():
        m = _CODES.match(line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group("labels")))
            out[(labels.get("verb", ""), labels.get("code", ""))] += int(float(m.group("value")))
    return out


def _delay(speed: float | None) -> float:
    return 0.0 if speed is None else CHUNK_SECONDS / speed


def _label(speed: float | None) -> str:
    return "0 (no engine time)" if speed is None else f"{speed:g}×"


def _ready(env: Env, ns: str, workers: int) -> None:
    wait(
        lambda: (
            len(env.store.list_leases(ns, "app.kubernetes.io/component=worker").items) == workers
        ),
        300,
        "the workers to register",
    )


def single(env: Env, *, jobs: int = 3, seconds_per_job: float = 15.0) -> dict[str, Any]:
    """One worker at each engine speed; chunks per job so that each job has about
    `seconds_per_job` of engine time (300 chunks at 600×, and 300 with no engine time)."""
    out: dict[str, Any] = {}
    for speed in SPEEDS:
        delay = _delay(speed)
        chunks = 300 if not delay else max(1, round(seconds_per_job / delay))
        ns = env.namespace()
        op = f"operator-{ns}"
        who = env.service_accounts(ns)
        env.operator(ns, name=op, kubeconfig=who["operator"])
        (name,) = env.workers(ns, 1, prefix=f"{ns}-w", idle_exit=3600, kubeconfig=who["worker"])
        _ready(env, ns, 1)
        before = env.api_counts()
        env.store.create_batch(ns, simulated_batch("p", jobs, chunks=chunks, delay=delay))
        wait(functools.partial(_complete, env, ns, "p"), 600 + jobs * 60, "the Batch to complete")
        after = env.api_counts()
        env.stop([name, op])
        events = env.events(name)
        claimed = {e["job"]: _stamp(e) for e in events if e.get("event") == "claimed"}
        done = [e for e in events if e.get("event") == "completed"]
        walls = [_stamp(e) - claimed[e["job"]] for e in done]
        # The worker's whole span, the waits between jobs too (offer, claim, media opening).
        span = max(_stamp(e) for e in done) - min(claimed.values())
        engine = [float(e["engine_seconds"]) for e in done]
        lease_writes = [int(e["lease_writes"]) for e in done]
        kinds = _writes(before, after)
        writes = sum(kinds.values())
        wall = sum(walls)
        out[_label(speed)] = {
            "speed": speed,
            "chunks_per_job": chunks,
            "jobs": len(done),
            "wall_seconds_per_job": round(wall / len(done), 2),
            "engine_seconds_per_job": round(sum(engine) / len(done), 2),
            "control_plane_share": round((wall - sum(engine)) / wall, 4) if wall else None,
            "control_plane_share_of_span": round((span - sum(engine)) / span, 4) if span else None,
            "control_plane_ms_per_chunk": round(
                1000 * (wall - sum(engine)) / (len(done) * chunks), 2
            ),
            "lease_writes_per_job": round(sum(lease_writes) / len(done), 2),
            "api_writes_per_job": round(writes / len(done), 2),
            "api_writes_per_worker_second": round(writes / wall, 3) if wall else None,
            "lease_writes_per_worker_second": round(sum(lease_writes) / wall, 3) if wall else None,
            "writes_by_kind_per_job": {k: round(v / len(done), 2) for k, v in kinds.most_common()},
            "stopwatch_per_job": {
                k: round(sum(float(e.get(f"{k}_seconds", 0)) for e in done) / len(done), 3)
                for k in ("lease", "store", "engine", "media", "engine_waits")
            },
        }
    return out


BARE = textwrap.dedent(
    """
    import sys, threading, time
    from recall.engines.base import TranscribeRequest
    from recall.engines.simulated import SimulatedEngine
    from recall.media.types import Chunk
    from recall.resources import TranscriptionJob
    chunks, delay = int(sys.argv[1]), float(sys.argv[2])
    job = TranscriptionJob.from_api({"apiVersion": "recall.dev/v1alpha1",
        "kind": "TranscriptionJob", "metadata": {"name": "bare", "namespace": "b"},
        "spec": {"source": {"url": "file:///bare.wav"}, "engine": {"name": "simulated",
        "simulate": {"chunks": chunks, "chunkDelaySeconds": delay}}}})
    engine = SimulatedEngine(chunks=chunks, chunk_delay_seconds=delay)
    media = engine.load_media(job)
    cancel = threading.Event()
    print("ready", flush=True)
    sys.stdin.readline()  # every process starts at once
    started = time.monotonic()
    for chunk in media.chunks(None, cancel):
        engine.transcribe(TranscribeRequest.of(chunk, job=job, cancel=cancel))
    print(time.monotonic() - started, flush=True)
    """
)


def bare(workers: int, chunks: int, delay: float) -> float:
    """Audio-seconds per second of `workers` processes making the engine calls alone: from a
    common start to the last one's end, as the processes time themselves."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", BARE, str(chunks), str(delay)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=die_with_parent,
        )
        for _ in range(workers)
    ]
    for p in procs:  # imported and waiting
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    seconds = max(float(p.communicate(timeout=600)[0].split()[-1]) for p in procs)
    return workers * chunks * CHUNK_SECONDS / seconds


def fleet(env: Env, workers: int, *, jobs_per_worker: int = 2, chunks: int = 60) -> dict[str, Any]:
    """`workers` workers at 600× drain a Batch of `jobs_per_worker × workers` jobs of
    `chunks` chunks (3 s of engine time each)."""
    delay = _delay(600.0)
    jobs = jobs_per_worker * workers
    ns = env.namespace()
    op = f"operator-{ns}"
    who = env.service_accounts(ns)
    env.operator(ns, name=op, kubeconfig=who["operator"])
    names = env.workers(ns, workers, prefix=f"{ns}-w", idle_exit=3600, kubeconfig=who["worker"])
    _ready(env, ns, workers)
    time.sleep(2)
    before, codes_before = env.api_counts(), _codes(env.cp.get_raw("/metrics", timeout=30))
    started = time.time()
    env.store.create_batch(ns, simulated_batch("f", jobs, chunks=chunks, delay=delay, lease=30))
    wait(lambda: _complete(env, ns, "f"), 1800, "the Batch to complete", every=0.5)
    finished = time.time()
    after, codes_after = env.api_counts(), _codes(env.cp.get_raw("/metrics", timeout=30))
    env.stop([*names, op])
    events = [e for n in names for e in env.events(n)]
    done = [e for e in events if e.get("event") == "completed"]
    last = max(_stamp(e) for e in done)
    seconds = min(finished, last) - started
    writes = sum(n for (verb, _r, _s), n in (after - before).items() if verb in MUTATING)
    codes = codes_after - codes_before
    audio = jobs * chunks * CHUNK_SECONDS
    limit = bare(workers, jobs_per_worker * chunks, delay)
    expired = sum(j.status.expired_leases for j in env.jobs(ns))
    return {
        "workers": workers,
        "jobs": jobs,
        "chunks_per_job": chunks,
        "seconds": round(seconds, 1),
        "api_writes_per_second": round(writes / seconds, 1),
        "api_writes_per_job": round(writes / jobs, 2),
        "conflicts_409": sum(n for (_v, code), n in codes.items() if code == "409"),
        "throttled_429": sum(n for (_v, code), n in codes.items() if code == "429"),
        "expired_leases": expired,
        "leases_lost": sum(1 for e in events if e.get("event") == "lease_lost"),
        "audio_seconds_per_second": round(audio / seconds, 1),
        "bare_engine_audio_seconds_per_second": round(limit, 1),
        "ratio_to_bare": round(audio / seconds / limit, 3),
    }


def measure(env: Env, quick: bool = False) -> dict[str, Any]:
    return {
        "single": single(env, jobs=2 if quick else 3, seconds_per_job=6.0 if quick else 15.0),
        "fleet": {
            w: fleet(env, w, jobs_per_worker=2, chunks=30 if quick else 60)
            for w in ((4, 16) if quick else (16, 64))
        },
    }


if __name__ == "__main__":  # a quick look: python -m bench.pace
    from bench.harness import environment

    with environment() as env:
        print(json.dumps(measure(env, quick=True), indent=1))


# -- the report ------------------------------------------------------------------------------


def _table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    return [*out, *("| " + " | ".join(str(c) for c in row) + " |" for row in rows), ""]


def _pct(share: float | None) -> str:
    return "—" if share is None else f"{100 * share:.1f} %"


def markdown(section: dict[str, Any], plotted: bool) -> list[str]:
    """The pace section of docs/benchmarks.md."""
    lines = ["## The engine sets the pace", ""]
    single_runs = section.get("single") or {}
    if single_runs:
        lines += [
            "One worker, one job at a time, 30-second chunks, the simulated engine taking a "
            "chunk's share of the speed. Wall time is the worker's, from the claim to the "
            "complete; the control plane's share is what of it is not the engine (claim, media, "
            "waits for the store or for a lease, the transcript, complete); with the gaps between "
            "jobs, it is taken over the worker's whole span, from its first claim to its last "
            "complete (the operator's offer of the next job, the claim). Lease writes are the "
            "worker's own (claim, renewals, complete); API writes are the API server's count of "
            "every mutating request in the run (also the operator's offer, publish and Batch "
            "status, and the workers' registration), per job and per second of the worker's "
            "wall time. Checkpoints every 10 s (the default).",
            "",
        ]
        rows = [
            [
                label,
                r["chunks_per_job"],
                r["wall_seconds_per_job"],
                r["engine_seconds_per_job"],
                _pct(r["control_plane_share"]),
                _pct(r.get("control_plane_share_of_span")),
                r["control_plane_ms_per_chunk"],
                r["lease_writes_per_job"],
                r["api_writes_per_job"],
                r["api_writes_per_worker_second"],
            ]
            for label, r in single_runs.items()
        ]
        lines += _table(
            [
                "engine speed",
                "chunks/job",
                "wall s/job",
                "engine s/job",
                "control plane's share",
                "share with the gaps between jobs",
                "control plane ms/chunk",
                "lease writes/job",
                "API writes/job",
                "API writes per worker-second",
            ],
            rows,
        )
    at_600 = single_runs.get("600×") or {}
    if at_600.get("writes_by_kind_per_job"):
        lines += [
            "API writes per job by kind at 600× (the Batch's own writes — its creation, kopf's "
            "and the operator's status writes — are shared by its jobs; the workers' "
            "registration Leases are renewed every 5 s whatever they do):",
            "",
        ]
        lines += _table(
            ["request", "per job"], [[k, v] for k, v in at_600["writes_by_kind_per_job"].items()]
        )
    fleet_runs = section.get("fleet") or {}
    if fleet_runs:
        lines += [
            "W workers at 600× drain a Batch (3 s of engine time a job). Writes, 409s and 429s "
            "are the API server's own counts over the run; audio-seconds per second against the "
            "same W processes making the same engine calls with no control plane (this "
            "machine's limit for that engine).",
            "",
        ]
        rows = [
            [
                w,
                r["jobs"],
                r["api_writes_per_second"],
                r["api_writes_per_job"],
                r["conflicts_409"],
                r["throttled_429"],
                r["expired_leases"],
                r["audio_seconds_per_second"],
                r["bare_engine_audio_seconds_per_second"],
                r["ratio_to_bare"],
            ]
            for w, r in sorted(fleet_runs.items(), key=lambda kv: int(kv[0]))
            if "error" not in r
        ]
        lines += _table(
            [
                "workers",
                "jobs",
                "API writes/s",
                "API writes/job",
                "409s",
                "429s",
                "expired leases",
                "audio-s/s",
                "bare engine audio-s/s",
                "ratio",
            ],
            rows,
        )
    if plotted:
        lines += ["![pace](bench/pace.png)", ""]
    return lines


def plot(section: dict[str, Any], directory: Any) -> bool:
    """docs/bench/pace.png: the control plane's share and the writes per job by engine speed."""
    single_runs = section.get("single") or {}
    if not single_runs:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(single_runs)
    shares = [100 * (single_runs[k]["control_plane_share"] or 0) for k in labels]
    writes = [single_runs[k]["lease_writes_per_job"] for k in labels]
    chunks = [single_runs[k]["chunks_per_job"] for k in labels]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    bars = left.bar(labels, shares, color="tab:blue")
    left.bar_label(bars, labels=[f"{x:.1f} %" for x in shares])
    left.axhline(5, color="grey", linestyle=":", label="goal at 600×: 5 %")
    left.set(ylabel="% of the job's wall time", title="The control plane's share")
    left.legend()
    bars = right.bar(labels, writes, color="tab:orange", label="lease writes per job")
    right.bar_label(bars, labels=[f"{x:g}" for x in writes])
    right.plot(labels, chunks, "k.--", label="chunks per job (one write each, before)")
    right.set(yscale="log", ylabel="per job", title="Lease writes per job")
    right.legend()
    for ax in (left, right):
        ax.set_xlabel("engine speed (real time)")
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(directory / "pace.png", dpi=100)
    plt.close(fig)
    return True
