"""Fault injection: crash the process at a named point, for the crash-consistency tests.

`RECALL_FAULT` lists points, comma-separated, each optionally with a value the point's context
must match (`worker-after-chunk:3`: once a renewal naming three chunks or more landed). The
process dies by SIGKILL, like an OOM kill or a node loss: no `finally`, no cleanup. Unset in
production; reading it costs one dict lookup.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator


def _entries() -> Iterator[tuple[str, str]]:
    """(point, value) of each entry of `RECALL_FAULT`; none when it is unset."""
    spec = os.environ.get("RECALL_FAULT")
    for entry in spec.split(",") if spec else ():
        name, _, value = entry.strip().partition(":")
        yield name, value


def armed(point: str, **context: object) -> bool:
    return any(
        name == point and (not value or any(str(v) == value for v in context.values()))
        for name, value in _entries()
    )


def hit(point: str, **context: object) -> None:
    """SIGKILL this process if `RECALL_FAULT` names `point` (and its value matches)."""
    if armed(point, **context):
        print(f"recall: fault injected at {point} {context}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


_paused: set[str] = set()


def pause(point: str, **context: object) -> None:
    """SIGSTOP this process, once per point, if `RECALL_FAULT` names `point`: a long GC pause
    or a frozen VM at the most awkward moment. A test resumes it with SIGCONT."""
    if point not in _paused and armed(point, **context):
        _paused.add(point)
        print(f"recall: paused at {point} {context}", file=sys.stderr, flush=True)
        # To this thread, not the process: another thread could take the signal a moment
        # later while this one runs on past the point.
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)


_lost: set[str] = set()


def answer_lost(action: str) -> bool:
    """True once per action if `RECALL_FAULT` names `lose-answer:<action>`: the caller, whose
    write was applied, then acts as if its answer was lost (a timeout or reset after the
    commit)."""
    point = f"lose-answer:{action}"
    if point in _lost or not armed("lose-answer", action=action):
        return False
    _lost.add(point)
    print(f"recall: answer of {action} dropped", file=sys.stderr, flush=True)
    return True


def latency() -> float:
    """Seconds to add before every API request, if `RECALL_FAULT` names `api-latency:<seconds>`
    (a slow or distant API server)."""
    for name, value in _entries():
        if name == "api-latency":
            try:
                return max(0.0, float(value))
            except ValueError:
                return 0.0
    return 0.0
