"""What an unexpected error of an attempt (a bug, an engine's surprise) becomes: a retriable
`WorkerError` failure of the job, and one `work_error` log line.

Contract: for a job that redacts (`spec.transcript.redact`) neither the job's `lastError` nor
the log holds the error's message or traceback, only its type and a fixed hint: a message can
quote the transcript (a pydantic `ValidationError` shows the value it refused). Other jobs keep
the message, and the log its traceback.
"""

from __future__ import annotations

from recall.resources.errors import JobFailure
from recall.worker.holder import LeaseHolder

WITHHELD = "message withheld: the job redacts, and an error's message may quote the transcript"


def unexpected(h: LeaseHolder, e: Exception) -> JobFailure:
    """The failure for `e`, an unexpected error of `h`'s job, once logged (see the contract)."""
    name = type(e).__name__
    t = h.known.spec.transcript
    if t is not None and t.redact is not None:
        h.log.error("work_error", error=name)
        return JobFailure("WorkerError", f"{name} ({WITHHELD})", permanent=False)
    h.log.exception("work_error")
    return JobFailure("WorkerError", f"{name}: {e}", permanent=False)
