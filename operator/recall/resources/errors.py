"""The failure a job records: `status.lastError` with a reason, and whether a retry can help.

Raised by whatever does a job's work (media, engine, transcript store); the worker turns it
into a fail (`permanent=False`: queued again after a backoff) or a Failed job
(`permanent=True`: a missing file, a 404, undecodable media, refused credentials).
"""

from __future__ import annotations


class JobFailure(Exception):
    """A failure the job records: `reason` is CamelCase, `permanent` says if a retry can help."""

    def __init__(self, reason: str, message: str, *, permanent: bool) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.permanent = permanent
