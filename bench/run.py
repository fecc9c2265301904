"""`make bench`: run the benchmarks and write docs/benchmarks.md.

make bench                            # everything (about 10 minutes on 2 cores)
make bench BENCH_ARGS="reclaim burst" # some of them
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

from bench import control_plane, engine_rtf

OUT = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def engine() -> dict[str, Any]:
    return engine_rtf.measure(120.0, threads=1)


ALL = {**control_plane.BENCHES, "engine": engine}


def render(results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "# Benchmarks",
        "",
        f"Measured {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC on {platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, against the local "
        "control plane (kube-apiserver v1.37 and etcd v3.6 as processes, etcd without fsync). "
        "Regenerate with `make bench`; what each number means is in `bench/control_plane.py` "
        "and `bench/engine_rtf.py`.",
        "",
    ]
    for name, result in results.items():
        lines += [f"## {name}", "", "| measure | value |", "| --- | --- |"]
        lines += [f"| {k} | {v} |" for k, v in result.items()]
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", choices=[*ALL, []], help="benchmarks to run")
    parser.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = parser.parse_args()
    results: dict[str, dict[str, Any]] = {}
    for name in args.names or list(ALL):
        print(f"[bench] {name} ...", file=sys.stderr, flush=True)
        results[name] = ALL[name]()
        print(json.dumps({name: results[name]}), flush=True)
    if not args.no_write and not args.names:
        OUT.parent.mkdir(exist_ok=True)
        OUT.write_text(render(results))
        print(f"[bench] wrote {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
