"""The lease protocol as pure functions: claim, renew, complete, fail, release, reclaim, cancel.

Each function takes the job's current status (as read at some resourceVersion R), the time,
and who is asking, and returns either the new status or a `Refusal` saying why the action is
not allowed from that state. They never read a clock or talk to the API server: the caller
(`recall.kube.fenced_write`) applies the returned status with a PATCH guarded by
`metadata.resourceVersion: R`, so the check here and the write there are atomic.

Rules (DESIGN §3):
- A worker may claim only a Queued job whose backoff (`notBefore`) has passed, that is not
  suspended, and whose attempt budget is not spent. A claim binds a fresh random token.
- renew, complete, fail and release require phase Leased, holder = the caller and
  token = the caller's token. Anything else means the lease is lost.
- reclaim requires phase Leased and an expiry the operator observed on its own monotonic clock
  for exactly this lease (same token, same renewTime); any renewal since then makes it refuse.
- Terminal phases (Succeeded, Failed, Cancelled) refuse everything.

Attempt budget: `attempts - releases < maxAttempts`. A claim uses one attempt; a graceful
release gives it back, so rolling restarts of workers cannot exhaust a job.
"""

from __future__ import annotations

import datetime as dt
import secrets
from dataclasses import dataclass
from enum import StrEnum

from recall.models import (
    JobError,
    JobStatus,
    Lease,
    Phase,
    Progress,
    Result,
    set_condition,
)

TOKEN_BYTES = 16


class RefusalReason(StrEnum):
    NOT_QUEUED = "NotQueued"
    BACKOFF = "Backoff"
    SUSPENDED = "Suspended"
    ATTEMPTS_EXHAUSTED = "AttemptsExhausted"
    NOT_LEASED = "NotLeased"
    NOT_HOLDER = "NotHolder"
    TOKEN_MISMATCH = "TokenMismatch"
    NOT_EXPIRED = "NotExpired"
    RENEWED = "Renewed"
    TERMINAL = "Terminal"
    GONE = "Gone"


@dataclass(frozen=True)
class Refusal:
    """An action is not allowed from the state it was checked on."""

    reason: RefusalReason
    detail: str = ""


Decision = JobStatus | Refusal


def new_token() -> str:
    """A fresh random lease token (32 hex characters)."""
    return secrets.token_hex(TOKEN_BYTES)


def attempts_left(status: JobStatus, max_attempts: int) -> int:
    return max_attempts - (status.attempts - status.releases)


def retry_backoff(failures: int, jitter: float, base: float = 5.0, cap: float = 300.0) -> float:
    """Seconds to wait before retry number `failures` (1, 2, ...): exponential, capped, jittered.

    `jitter` in [0, 1) spreads retries over [delay/2, delay) so failed jobs do not come back
    in lockstep ("equal jitter").
    """
    delay: float = min(cap, base * 2.0 ** max(0, failures - 1))
    return delay / 2 + (delay / 2) * jitter


def _holder_check(status: JobStatus, worker: str, token: str) -> Refusal | None:
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


def claim(
    status: JobStatus,
    now: dt.datetime,
    worker: str,
    token: str,
    *,
    lease_seconds: int,
    max_attempts: int,
    suspended: bool = False,
) -> Decision:
    """Queued → Leased by `worker` with `token`; attempts + 1."""
    phase = status.effective_phase
    if phase.terminal:
        return Refusal(RefusalReason.TERMINAL, f"job is {phase}")
    if phase is not Phase.QUEUED:
        return Refusal(RefusalReason.NOT_QUEUED, f"job is {phase}")
    if suspended:
        return Refusal(RefusalReason.SUSPENDED)
    if status.not_before is not None and now < status.not_before:
        return Refusal(RefusalReason.BACKOFF, f"not before {status.not_before.isoformat()}")
    if attempts_left(status, max_attempts) <= 0:
        return Refusal(RefusalReason.ATTEMPTS_EXHAUSTED, f"{status.attempts} attempts")
    return status.model_copy(
        update={
            "phase": Phase.LEASED,
            "lease": Lease(
                holder=worker,
                token=token,
                acquire_time=now,
                renew_time=now,
                duration_seconds=lease_seconds,
            ),
            "attempts": status.attempts + 1,
            "not_before": None,
            "started_at": status.started_at or now,
        }
    )


def renew(
    status: JobStatus,
    now: dt.datetime,
    worker: str,
    token: str,
    *,
    progress: Progress | None = None,
) -> Decision:
    """The heartbeat: renewTime = now, and the checkpoint when one is given."""
    if refusal := _holder_check(status, worker, token):
        return refusal
    assert status.lease is not None
    update: dict[str, object] = {"lease": status.lease.model_copy(update={"renew_time": now})}
    if progress is not None:
        update["progress"] = progress
    return status.model_copy(update=update)


def complete(
    status: JobStatus, now: dt.datetime, worker: str, token: str, *, result: Result
) -> Decision:
    """Leased → Succeeded with the result reference; the lease is cleared."""
    if refusal := _holder_check(status, worker, token):
        return refusal
    progress = status.progress
    if progress is not None:
        progress = Progress.of(progress.chunks_total, progress.chunks_total, progress.checkpoint)
    return status.model_copy(
        update={
            "phase": Phase.SUCCEEDED,
            "lease": None,
            "result": result,
            "progress": progress,
            "completed_at": now,
            "conditions": set_condition(
                status.conditions,
                "Complete",
                "True",
                "Transcribed",
                f"transcript in ConfigMap {result.config_map}",
                now,
            ),
        }
    )


def fail(
    status: JobStatus,
    now: dt.datetime,
    worker: str,
    token: str,
    *,
    reason: str,
    message: str,
    permanent: bool,
    max_attempts: int,
    jitter: float,
    backoff_base: float = 5.0,
    backoff_cap: float = 300.0,
) -> Decision:
    """Leased → Queued with a backoff, or → Failed when permanent or the attempts are spent."""
    if refusal := _holder_check(status, worker, token):
        return refusal
    error = JobError(
        reason=reason, message=message, permanent=permanent, attempt=status.attempts, time=now
    )
    failures = status.failures + 1
    if permanent or attempts_left(status, max_attempts) <= 0:
        final_reason = reason if permanent else "AttemptsExhausted"
        return status.model_copy(
            update={
                "phase": Phase.FAILED,
                "lease": None,
                "failures": failures,
                "last_error": error,
                "completed_at": now,
                "conditions": set_condition(
                    status.conditions, "Failed", "True", final_reason, message, now
                ),
            }
        )
    delay = retry_backoff(failures, jitter, backoff_base, backoff_cap)
    return status.model_copy(
        update={
            "phase": Phase.QUEUED,
            "lease": None,
            "failures": failures,
            "last_error": error,
            "not_before": now + dt.timedelta(seconds=delay),
        }
    )


def release(status: JobStatus, now: dt.datetime, worker: str, token: str) -> Decision:
    """Leased → Queued at once (graceful stop); the attempt is given back."""
    del now  # part of the uniform signature; a release has no time-dependent effect
    if refusal := _holder_check(status, worker, token):
        return refusal
    return status.model_copy(
        update={"phase": Phase.QUEUED, "lease": None, "releases": status.releases + 1}
    )


@dataclass(frozen=True)
class Observation:
    """What the operator saw of one lease, and when, on its own monotonic clock."""

    token: str
    renew_time: dt.datetime
    duration_seconds: int
    observed_at: float  # time.monotonic() of the operator when this renewTime was first seen

    def expired(self, now_monotonic: float) -> bool:
        return now_monotonic - self.observed_at >= self.duration_seconds

    def expires_in(self, now_monotonic: float) -> float:
        return self.observed_at + self.duration_seconds - now_monotonic


def reclaim(
    status: JobStatus,
    now: dt.datetime,
    now_monotonic: float,
    observation: Observation,
    *,
    max_attempts: int,
) -> Decision:
    """Leased (observed expired) → Queued, or → Failed when attempts are spent; expiredLeases + 1.

    `now` stamps the status; expiry is judged only from `observation` and `now_monotonic`.
    """
    phase = status.effective_phase
    if phase.terminal:
        return Refusal(RefusalReason.TERMINAL, f"job is {phase}")
    if phase is not Phase.LEASED or status.lease is None:
        return Refusal(RefusalReason.NOT_LEASED, f"job is {phase}")
    lease = status.lease
    if lease.token != observation.token or lease.renew_time != observation.renew_time:
        return Refusal(RefusalReason.RENEWED, "the lease changed since it was observed")
    if not observation.expired(now_monotonic):
        return Refusal(
            RefusalReason.NOT_EXPIRED, f"{observation.expires_in(now_monotonic):.1f} s left"
        )
    expired = status.expired_leases + 1
    message = f"lease of {lease.holder} expired (attempt {status.attempts})"
    error = JobError(
        reason="LeaseExpired", message=message, permanent=False, attempt=status.attempts, time=now
    )
    if attempts_left(status, max_attempts) <= 0:
        return status.model_copy(
            update={
                "phase": Phase.FAILED,
                "lease": None,
                "expired_leases": expired,
                "last_error": error,
                "completed_at": now,
                "conditions": set_condition(
                    status.conditions, "Failed", "True", "AttemptsExhausted", message, now
                ),
            }
        )
    return status.model_copy(
        update={
            "phase": Phase.QUEUED,
            "lease": None,
            "expired_leases": expired,
            "last_error": error,
        }
    )


def cancel(status: JobStatus, now: dt.datetime, *, reason: str, message: str) -> Decision:
    """Any non-terminal phase → Cancelled; the lease is cleared, so its holder loses it."""
    phase = status.effective_phase
    if phase.terminal:
        return Refusal(RefusalReason.TERMINAL, f"job is {phase}")
    return status.model_copy(
        update={
            "phase": Phase.CANCELLED,
            "lease": None,
            "completed_at": now,
            "conditions": set_condition(
                status.conditions, "Cancelled", "True", reason, message, now
            ),
        }
    )


def exhaust(status: JobStatus, now: dt.datetime, *, max_attempts: int) -> Decision:
    """Queued with no attempts left → Failed. Heals a job no worker may claim any more."""
    if status.effective_phase is not Phase.QUEUED:
        return Refusal(RefusalReason.NOT_QUEUED)
    if attempts_left(status, max_attempts) > 0:
        return Refusal(RefusalReason.NOT_EXPIRED, "attempts left")
    message = f"{status.attempts} attempts used"
    return status.model_copy(
        update={
            "phase": Phase.FAILED,
            "completed_at": now,
            "conditions": set_condition(
                status.conditions, "Failed", "True", "AttemptsExhausted", message, now
            ),
        }
    )
