"""`python -m recall_dev.chaos [--seed N ...] [--profile short|long] [--workdir DIR]`:
one chaos run per seed; prints one line per seed and, for a failed one, its violations.
Exit code 1 when any invariant was violated."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from recall_dev.chaos.history import load
from recall_dev.chaos.invariants import check
from recall_dev.chaos.outcome import Outcome
from recall_dev.chaos.run import run
from recall_dev.chaos.workload import PROFILES


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m recall_dev.chaos")
    parser.add_argument("--seed", type=int, action="append", help="repeat for more runs")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="short")
    parser.add_argument(
        "--workdir",
        type=Path,
        help="keep the records here (default: a temp dir, removed when the run passed)",
    )
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument(
        "--check", type=Path, metavar="DIR", help="check the records of a finished run again"
    )
    args = parser.parse_args()
    if args.check:
        history = load(args.check)
        outcome = Outcome(check(history), history, args.check)
        print(outcome.line)
        if not outcome.ok:
            print(outcome.report())
        return 0 if outcome.ok else 1
    failed = False
    for seed in args.seed or [1]:
        root = args.workdir or Path(tempfile.mkdtemp(prefix="recall-chaos-"))
        workdir = root / f"seed-{seed}"
        outcome = run(
            seed,
            PROFILES[args.profile],
            workdir,
            say=(lambda _m: None)
            if args.quiet
            else (lambda m: print(m, file=sys.stderr, flush=True)),
        )
        print(outcome.line, flush=True)
        if not outcome.ok:
            failed = True
            print(outcome.report(), flush=True)
            print(f"records kept in {workdir}", flush=True)
        elif args.workdir is None:
            shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
