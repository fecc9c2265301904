"""`make bench`: every benchmark in one run; writes docs/benchmarks.md and docs/bench/*.png.

    make bench                                  # everything (an hour or more on two cores)
    make bench BENCH_ARGS="--only limit throughput --quick"

A run of some sections keeps the other sections' figures of the last run (docs/bench/
results.json), and the report says from when they are.

Sections: pace (the control plane's share of a job at engine speeds of 10× to 600× and none,
and fleets of fast workers against bare engine calls), slots (several leases in one worker
process against one lease a process), rows (the sizes that broke earlier
versions), limit (raw fenced writes/s),
throughput (1, 4, 16, 64 workers; offers and, for the comparison of designs, the queue watch),
fairness, reclaim (among 10,000 jobs), big (a 10,000-item Batch), huge (a 100,000-item Batch:
about two hours on two cores), versus (recall in the comparison's terms), compare
(procrastinate and Celery), engine (Whisper's real-time factor), longfile (a 10-hour
recording), etcd (what the work costs etcd: a 1-minute and a 10-hour recording in the earlier
ConfigMap layout and in the results store, and a Batch of hour-sized transcripts),
transcripts (recall against bare faster-whisper on LibriVox speech, word timing error, the
subtitle rules, the vocabulary), languages (the multilingual base model against faster-whisper
on espeak-ng speech in nine languages: language identification, WER, segments of files that
switch language, translation), batching (the Whisper engine batching 1, 4 and 8 chunks a
call against one chunk a call, on this CPU), enginecpu (where the worker's engine path spends
its CPU per audio second: the model's calls against every stage around them), gpu (the engine
over a grid of slots × batchSize on a CUDA device, skipped where none is visible), pools (a
GPU pool's autoscaling from zero on a kind node that advertises nvidia.com/gpu: the pod test,
several minutes), speakers (DER and the voices found on espeak-ng dialogues of 2-4 voices, the
labelling's CPU against the transcription's, a worker's memory labelling 0.5-2 hours). Every
section runs even when another fails; the failure is recorded in the results.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
OUT = DOCS / "benchmarks.md"
PLOTS = DOCS / "bench"
SECTIONS = [
    "pace",
    "slots",
    "rows",
    "limit",
    "throughput",
    "fairness",
    "reclaim",
    "big",
    "huge",
    "versus",
    "compare",
    "engine",
    "longfile",
    "etcd",
    "transcripts",
    "batching",
    "enginecpu",
    "gpu",
    "pools",
    "speakers",
    "languages",
]

# The sections measured against the shared control plane and store (`bench.harness.environment`).
ON_THE_CONTROL_PLANE = frozenset(
    {"pace", "slots", "rows", "limit", "throughput", "fairness", "reclaim", "big", "huge"}
    | {"etcd", "versus"}
)


def _section(results: dict[str, Any], name: str, fn: Callable[[], Any]) -> None:
    print(f"[bench] {name} ...", file=sys.stderr, flush=True)
    started = time.monotonic()
    try:
        results[name] = fn()
    except Exception as e:
        traceback.print_exc()
        results[name] = {"error": f"{type(e).__name__}: {e}"}
    print(
        f"[bench] {name} done in {time.monotonic() - started:.0f} s: "
        f"{json.dumps(results[name], default=str)[:400]}",
        file=sys.stderr,
        flush=True,
    )


def run(only: list[str], quick: bool) -> dict[str, Any]:
    from bench import scale, sizes, versus
    from bench.harness import environment

    results: dict[str, Any] = {}
    workers = (1, 4, 16) if quick else (1, 4, 16, 64)
    if not set(only) & ON_THE_CONTROL_PLANE:
        return run_alone(only, quick, results)
    with environment() as env:
        if "pace" in only:
            from bench import pace

            _section(results, "pace", lambda: pace.measure(env, quick))
        if "slots" in only:
            from bench import slots

            _section(results, "slots", lambda: slots.measure(env, quick))
        if "rows" in only:
            from bench import rows

            _section(results, "rows", lambda: rows.measure(env))
        if "limit" in only or "throughput" in only or "versus" in only:
            _section(results, "limit", lambda: scale.write_limit(env, seconds=5 if quick else 15))
        limit = float((results.get("limit") or {}).get("limit") or 200.0)
        if "throughput" in only or "versus" in only:

            def throughput() -> dict[str, Any]:
                out: dict[str, Any] = {"offers": {}, "queue": {}}
                for w in workers:
                    jobs = max(100 if quick else 1500, 25 * w)
                    out["offers"][w] = scale.throughput(env, w, jobs=jobs, limit=limit)
                for w in workers[-2:]:
                    jobs = max(100 if quick else 1500, 25 * w)
                    out["queue"][w] = scale.throughput(
                        env, w, jobs=jobs, limit=limit, dispatch="queue"
                    )
                return out

            _section(results, "throughput", throughput)
        if "fairness" in only:
            _section(
                results,
                "fairness",
                lambda: scale.fair_share(
                    env, workers=4 if quick else 8, big=300 if quick else 2000
                ),
            )
        if "reclaim" in only:
            _section(
                results,
                "reclaim",
                lambda: sizes.reclaim_delay(
                    env, jobs=1000 if quick else 10_000, expiries=60 if quick else 240
                ),
            )
        if "big" in only:
            _section(
                results,
                "big",
                lambda: {"10k": sizes.big_batch(env, 2000 if quick else 10_000, workers=16)},
            )
        if "huge" in only:
            _section(
                results,
                "huge",
                lambda: {"100k": sizes.big_batch(env, 10_000 if quick else 100_000, workers=16)},
            )
        if "etcd" in only:
            from bench import etcd

            _section(
                results,
                "etcd",
                lambda: {
                    "recordings": etcd.recordings(env),
                    "hours": etcd.batch_of_hours(env, 1000 if quick else 10_000, workers=16),
                },
            )
        if "versus" in only:
            tp = (results.get("throughput") or _saved("throughput")).get("offers") or {}
            rate = {w: r["jobs_per_second"] for w, r in tp.items() if w in (1, 4, 16)}
            _section(results, "versus", lambda: versus.figures(env, rate))
    return run_alone(only, quick, results)


def run_alone(only: list[str], quick: bool, results: dict[str, Any]) -> dict[str, Any]:
    """The sections that start what they measure themselves (no shared control plane: an idle
    API server and etcd would be counted in the engine sections' CPU)."""
    if "compare" in only:
        from bench import compare

        _section(
            results,
            "compare",
            lambda: compare.run_all(jobs=500 if quick else 2000, kill_wait=30.0),
        )
    if "engine" in only:
        from bench import engine_rtf

        _section(results, "engine", lambda: engine_rtf.measure(120.0, threads=1))
    if "transcripts" in only:
        from bench import transcripts

        _section(results, "transcripts", lambda: transcripts.measure(3 if quick else 6))
    if "batching" in only:
        from bench import batching

        _section(results, "batching", lambda: batching.measure(4 if quick else 8))
    if "enginecpu" in only:
        from bench import enginecpu

        _section(results, "enginecpu", lambda: enginecpu.measure(4 if quick else 8))
    if "gpu" in only:
        from bench import gpu

        _section(results, "gpu", lambda: gpu.measure(quick))
    if "pools" in only:
        from bench import pools

        _section(results, "pools", pools.measure)
    if "speakers" in only:
        from bench import speakers

        _section(results, "speakers", lambda: speakers.measure(quick))
    if "languages" in only:
        from bench import languages

        _section(results, "languages", languages.measure)
    if "longfile" in only:

        def longfile() -> Any:
            from bench import longfile as lf

            if quick:  # the same path at a tenth of the size
                return lf.measure(hours=1.0, whisper_hours=0.1, russian_hours=0.5)
            return lf.measure()

        _section(results, "longfile", longfile)
    return results


def _int_keys(obj: Any) -> Any:
    """JSON's string keys back to ints where they were worker counts ("16" -> 16)."""
    if isinstance(obj, dict):
        return {
            (int(k) if isinstance(k, str) and k.isdigit() else k): _int_keys(v)
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [_int_keys(v) for v in obj]
    return obj


def _saved(section: str) -> dict[str, Any]:
    """A section's figures of the last run (docs/bench/results.json), or {}."""
    saved = PLOTS / "results.json"
    if not saved.exists():
        return {}
    found: dict[str, Any] = _int_keys(json.loads(saved.read_text()).get(section) or {})
    return found


def _carry_over(results: dict[str, Any], ran: list[str]) -> None:
    """Sections this run did not measure, with their figures of the last run that did."""
    saved = PLOTS / "results.json"
    if set(ran) >= set(SECTIONS) or not saved.exists():
        return
    old = json.loads(saved.read_text())
    old_when = (old.get("_run") or {}).get("when")
    carried = dict((old.get("_run") or {}).get("carried") or {})
    kept = {}
    for name in SECTIONS:
        if name in ran or name in results or name not in old:
            continue  # measured in this run (some sections run with others), or never
        results[name] = _int_keys(old[name])
        kept[name] = carried.get(name, old_when)
    results["_run"]["carried"] = kept


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=SECTIONS, default=SECTIONS)
    parser.add_argument("--quick", action="store_true", help="small sizes (minutes, not hours)")
    parser.add_argument("--no-write", action="store_true", help="do not update docs/")
    args = parser.parse_args()
    started = time.monotonic()
    results = run(args.only, args.quick)
    results["_run"] = {
        "when": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": (
            f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
        ),
        "seconds": round(time.monotonic() - started),
        "quick": args.quick,
    }
    _carry_over(results, args.only)
    print(json.dumps(results, default=str))
    if not args.no_write:
        from bench.report import write

        write(results, OUT, PLOTS)
        print(f"[bench] wrote {OUT} and {PLOTS}/", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
