"""The lease protocol's terms: why an action is refused, the attempt budget, the lease token and
the fence that presents it, the retry backoff, the update to Failed, and who holds a lease
(`recall.protocol.lease` has the rules and the transitions; `lease_operator` the operator's).

Pure: nothing here reads a clock, draws at random but `new_token`, or talks to the API server.
"""

from __future__ import annotations

import datetime as dt
import secrets
from dataclasses import dataclass
from enum import StrEnum

from recall.base.backoff import Backoff
from recall.resources import JobStatus, Phase, set_condition


class RefusalReason(StrEnum):
    NOT_QUEUED = "NotQueued"
    BACKOFF = "Backoff"
    NO_BACKOFF = "NoBackoff"
    SUSPENDED = "Suspended"
    ATTEMPTS_EXHAUSTED = "AttemptsExhausted"
    ATTEMPTS_LEFT = "AttemptsLeft"
    NOT_LEASED = "NotLeased"
    NOT_HOLDER = "NotHolder"
    TOKEN_MISMATCH = "TokenMismatch"
    NOT_EXPIRED = "NotExpired"
    RENEWED = "Renewed"
    TERMINAL = "Terminal"
    NOT_SUCCEEDED = "NotSucceeded"
    PUBLISHED = "Published"
    GONE = "Gone"
    UNCHANGED = "Unchanged"


@dataclass(frozen=True)
class Refusal:
    """An action is not allowed from the state it was checked on."""

    reason: RefusalReason
    detail: str = ""


Decision = JobStatus | Refusal


@dataclass(frozen=True)
class Budget:
    """A job's attempt limits, from its spec."""

    max_attempts: int
    max_releases: int

    def left(self, status: JobStatus) -> int:
        """Claims the job may still take."""
        return self.left_of(status.attempts, status.releases)

    def left_of(self, attempts: int, releases: int) -> int:
        return self.max_attempts + min(releases, self.max_releases) - attempts


def new_token() -> str:
    """A fresh random lease token (32 hex characters)."""
    return secrets.token_hex(16)


def fence(token: str, suffix: str | int) -> str:
    """The value of `status.fence` that presents `token` with a write-unique `suffix`."""
    return f"{token}/{suffix}"


def failed(status: JobStatus, now: dt.datetime, reason: str, message: str) -> dict[str, object]:
    """The update that ends a job as Failed, `reason` and `message` in its Failed condition."""
    conditions = set_condition(status.conditions, "Failed", "True", reason, message, now)
    return {"phase": Phase.FAILED, "completed_at": now, "conditions": conditions}


def retry_backoff(failures: int, jitter: float, base: float = 5.0, cap: float = 300.0) -> float:
    """Seconds before retry number `failures` (1, 2, ...): exponential, capped, and spread by
    `jitter` in [0, 1) over [delay/2, delay) ("equal jitter") so failed jobs do not return in
    lockstep."""
    backoff = Backoff(initial=base / 2, cap=cap / 2, jitter=1.0)
    return round(backoff.delay(max(0, failures - 1), u=jitter), 3)


def holder_refusal(status: JobStatus, worker: str, token: str) -> Refusal | None:
    """Why `worker` with `token` does not hold the lease on a job in `status` (None: it does):
    the refusal its renew, complete, fail or release would meet."""
    phase = status.effective_phase
    if phase.terminal:
        return Refusal(RefusalReason.TERMINAL, f"job is {phase}")
    if phase is not Phase.LEASED or status.lease is None:
        return Refusal(RefusalReason.NOT_LEASED, f"job is {phase}")
    if status.lease.holder != worker:
        return Refusal(RefusalReason.NOT_HOLDER, f"held by {status.lease.holder}")
    if status.lease.token != token:
        return Refusal(RefusalReason.TOKEN_MISMATCH, "lease was re-issued")
    return None


def queued_refusal(status: JobStatus) -> Refusal | None:
    """Why a job in `status` is not Queued (None: it is): the refusal of every queued-job action."""
    phase = status.effective_phase
    if phase.terminal:
        return Refusal(RefusalReason.TERMINAL, f"job is {phase}")
    if phase is not Phase.QUEUED:
        return Refusal(RefusalReason.NOT_QUEUED, f"job is {phase}")
    return None
