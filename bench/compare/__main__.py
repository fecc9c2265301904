"""`python -m bench.compare`: measure procrastinate and Celery, print the figures as JSON.

    python -m bench.compare                      # both systems, default arguments
    python -m bench.compare --only celery --jobs 500 --workers 1,4 --markdown

JSON goes to stdout; progress and, with --markdown, the table go to stderr. SIGTERM and Ctrl-C
stop the run and everything it started.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from types import FrameType

from bench import compare
from bench.compare.report import Figures


def _counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a list of worker counts: {text!r}") from exc
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"worker counts must be positive: {text!r}")
    return counts


def _stop(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000, help="zero-work jobs per drain")
    parser.add_argument("--workers", type=_counts, default=(1, 4, 16), help="e.g. 1,4,16")
    parser.add_argument("--kill-wait", type=float, default=30.0, help="longest wait for a re-run")
    parser.add_argument("--job-seconds", type=float, default=4.0, help="the slow job's length")
    parser.add_argument("--only", choices=["procrastinate", "celery"], help="one system only")
    parser.add_argument("--markdown", action="store_true", help="also print the table")
    args = parser.parse_args(argv)
    # Both end the run through KeyboardInterrupt, so every `finally` stops what it started
    # (SIGINT too: a shell starts background commands with it ignored).
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)

    systems = {
        "procrastinate": compare.procrastinate_figures,
        "Celery": compare.celery_figures,
    }
    results: dict[str, Figures] = {}
    for name, measure in systems.items():
        if args.only and args.only != name.lower():
            continue
        began = time.monotonic()
        print(f"[compare] {name} ...", file=sys.stderr, flush=True)
        results[name] = measure(
            jobs=args.jobs,
            workers=args.workers,
            kill_wait=args.kill_wait,
            job_seconds=args.job_seconds,
        )
        print(f"[compare] {name}: {time.monotonic() - began:.0f} s", file=sys.stderr, flush=True)
    print(json.dumps(results, indent=2))
    if args.markdown:
        print(compare.render_markdown(results), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
