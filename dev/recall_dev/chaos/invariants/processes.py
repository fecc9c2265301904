"""Invariant 9: no worker or operator ended on its own. A process the run SIGTERMed that did
not exit 0 is not a violation (it was asked to stop): it is reported in the run's line."""

from __future__ import annotations

from collections import Counter
from signal import SIGTERM

from recall_dev.chaos.fleet import EXITED, TERMINATED
from recall_dev.chaos.history import History
from recall_dev.chaos.invariants.verdict import Verdict


def check_processes(h: History, verdict: Verdict) -> None:
    ends: Counter[str] = Counter()
    unclean = []
    for p in h.processes:
        ends[p.reason or "alive"] += 1
        if p.reason == EXITED:
            verdict.add(
                9, None, f"{p.role} {p.name} exited on its own (code {p.returncode})", p.tail
            )
        elif (
            p.reason == TERMINATED
            and p.returncode != 0
            # SIGTERM before the handler is installed (it is, before the first log line)
            and not (p.returncode == -SIGTERM and not p.tail)
        ):
            # Told to stop, it stopped, but not cleanly (an abort at exit, say): not an
            # invariant of DESIGN §5, reported in the line.
            unclean.append(f"{p.name}: {p.returncode}")
    verdict.stats["ends"] = dict(ends)
    verdict.stats["unclean_stops"] = unclean
