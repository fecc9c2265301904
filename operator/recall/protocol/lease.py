"""The lease protocol as pure functions: claim, renew, complete, fail, release, reclaim, and the
operator's cancel, exhaust, reject, offer and end of backoff.

Each function takes the job's status as read at some resourceVersion R, the time and who is
asking, and returns either the new status or a `Refusal` saying why the action is not allowed
from that state. They never read a clock or talk to the API server: `recall.fencing` applies the
new status with a PATCH guarded by R, so the check here and the write there are atomic.

Rules (DESIGN §3, and the CRD's CEL rules that enforce them for every client):
- A worker claims only a Queued job that is not in backoff, not suspended, and whose attempt
  budget is not spent. A claim binds a fresh random token and takes one attempt.
- renew, complete, fail and release require phase Leased, holder = the caller and token = the
  caller's token. Anything else means the lease is lost.
- Every write to a leased job presents the lease token in `status.fence` as `<token>/<suffix>`
  with a suffix never used before on that lease (the holder counts its writes; the operator
  writes `reclaim-<attempt>` or `cancel-<attempt>`). A client that does not know the token
  cannot change a leased job.
- complete records the token and attempt in the result; the result never changes again.
- reclaim requires phase Leased and an expiry the operator observed on its own monotonic clock
  for exactly this lease (same token and renewTime); any renewal since makes it refuse.
- Terminal phases (Succeeded, Failed, Cancelled) refuse everything, but for the operator's one
  `publish` record on a Succeeded job (the second record of the two-record rule: the outputs
  and the index written after Succeeded).
- Retry backoff is a duration (`backoffSeconds`), judged on the operator's clock, which ends it
  (`end_backoff`); no two machines' clocks are ever compared.

Attempt budget: `attempts ≤ maxAttempts + min(releases, maxReleases)`. A claim uses one
attempt; a graceful release gives it back, at most `maxReleases` times, so rolling restarts
cannot exhaust a job and an endlessly evicted job still ends.
"""

from __future__ import annotations

import datetime as dt
import secrets
from dataclasses import dataclass
from enum import StrEnum

from recall.base.backoff import Backoff
from recall.protocol.observer import Observation
from recall.resources import (
    LOW_LANGUAGE_PROBABILITY,
    JobError,
    JobStatus,
    Lease,
    Offer,
    Phase,
    Progress,
    Published,
    Result,
    set_condition,
)

TOKEN_BYTES = 16


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
    return secrets.token_hex(TOKEN_BYTES)


def fence(token: str, suffix: str | int) -> str:
    """The value of `status.fence` that presents `token` with a write-unique `suffix`."""
    return f"{token}/{suffix}"


def retry_backoff(failures: int, jitter: float, base: float = 5.0, cap: float = 300.0) -> float:
    """Seconds to wait before retry number `failures` (1, 2, ...): exponential, capped, jittered.

    `jitter` in [0, 1) spreads retries over [delay/2, delay) so failed jobs do not come back
    in lockstep ("equal jitter": a `Backoff` from half the delay, stretched by up to itself).
    """
    backoff = Backoff(initial=base / 2, cap=cap / 2, jitter=1.0)
    return round(backoff.delay(max(0, failures - 1), u=jitter), 3)


def holder_refusal(status: JobStatus, worker: str, token: str) -> Refusal | None:
    """Why `worker` with `token` does not hold the lease on a job in `status` (None: it does):
    the refusal its renew, complete, fail or release would meet."""
    return _holder_check(status, worker, token)


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


def _queued_check(status: JobStatus) -> Refusal | None:
    phase = status.effective_phase
    if phase.terminal:
        return Refusal(RefusalReason.TERMINAL, f"job is {phase}")
    if phase is not Phase.QUEUED:
        return Refusal(RefusalReason.NOT_QUEUED, f"job is {phase}")
    return None


def claim(
    status: JobStatus,
    now: dt.datetime,
    worker: str,
    token: str,
    *,
    lease_seconds: int,
    budget: Budget,
    suspended: bool = False,
) -> Decision:
    """Queued → Leased by `worker` with `token`; attempts + 1; the offer, if any, is used up."""
    if refusal := _queued_check(status):
        return refusal
    if suspended:
        return Refusal(RefusalReason.SUSPENDED)
    if status.backoff_seconds is not None:
        return Refusal(RefusalReason.BACKOFF, f"retry after {status.backoff_seconds:g} s")
    if budget.left(status) <= 0:
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
            "fence": fence(token, 1),
            "offer": None,
            "attempts": status.attempts + 1,
            "started_at": status.started_at or now,
        }
    )


def renew(
    status: JobStatus,
    now: dt.datetime,
    worker: str,
    token: str,
    *,
    seq: int,
    progress: Progress | None = None,
) -> Decision:
    """The heartbeat: renewTime = now, and the checkpoint when one is given."""
    if refusal := _holder_check(status, worker, token):
        return refusal
    assert status.lease is not None
    update: dict[str, object] = {
        "lease": status.lease.model_copy(update={"renew_time": now}),
        "fence": fence(token, seq),
    }
    if progress is not None:
        update["progress"] = progress
    return status.model_copy(update=update)


def complete(
    status: JobStatus,
    now: dt.datetime,
    worker: str,
    token: str,
    *,
    seq: int,
    result: Result,
    chunks: int | None = None,
) -> Decision:
    """Leased → Succeeded with the result, which records this lease's token and attempt.

    `chunks` is the media's exact chunk count (the last checkpoint may predate the last
    chunks); without it the last checkpoint's total counts."""
    if refusal := _holder_check(status, worker, token):
        return refusal
    progress = status.progress
    if chunks is None and progress is not None:
        chunks = progress.chunks_total
    if chunks is not None:  # the transcript holds every chunk now: no checkpoint is left
        progress = Progress.of(chunks, chunks)
    accepted = result.model_copy(update={"token": token, "attempt": status.attempts})
    conditions = set_condition(
        status.conditions,
        "Complete",
        "True",
        "Transcribed",
        f"transcript at {result.transcript}",
        now,
    )
    p = result.language_probability
    if result.language and p is not None and p < LOW_LANGUAGE_PROBABILITY:
        message = (
            f"transcribed in {result.language}, detected with probability {p:.2f} (under "
            f"{LOW_LANGUAGE_PROBABILITY}): check the file's language"
        )
        conditions = set_condition(
            conditions, "LanguageUncertain", "True", "LowProbability", message, now
        )
    if result.channels == 1:  # channels: split asked of a file of one channel
        message = "channels: split was asked, but the file has one channel: transcribed as one"
        conditions = set_condition(conditions, "MonoSource", "True", "OneChannel", message, now)
    if result.speakers_asked is not None and result.speakers is not None:
        message = (
            f"{result.speakers_asked} speakers were asked for, {result.speakers} voices were "
            f"found: the words are labelled with those found"
        )
        conditions = set_condition(conditions, "SpeakersFewer", "True", "FewerVoices", message, now)
    return status.model_copy(
        update={
            "phase": Phase.SUCCEEDED,
            "lease": None,
            "fence": fence(token, seq),
            "result": accepted,
            "progress": progress,
            "completed_at": now,
            "conditions": conditions,
        }
    )


def fail(
    status: JobStatus,
    now: dt.datetime,
    worker: str,
    token: str,
    *,
    seq: int,
    reason: str,
    message: str,
    permanent: bool,
    budget: Budget,
    jitter: float,
    backoff_base: float = 5.0,
    backoff_cap: float = 300.0,
    progress: Progress | None = None,
) -> Decision:
    """Leased → Queued with a backoff, or → Failed when permanent or the attempts are spent.

    `progress`, when given, is the checkpoint the next attempt resumes from (the chunks this
    attempt made durable since its last renewal)."""
    if refusal := _holder_check(status, worker, token):
        return refusal
    error = JobError(
        reason=reason, message=message, permanent=permanent, attempt=status.attempts, time=now
    )
    failures = status.failures + 1
    common: dict[str, object] = {
        "lease": None,
        "fence": fence(token, seq),
        "failures": failures,
        "last_error": error,
    }
    if progress is not None:
        common["progress"] = progress
    if permanent or budget.left(status) <= 0:
        final_reason = reason if permanent else "AttemptsExhausted"
        return status.model_copy(
            update=common
            | {
                "phase": Phase.FAILED,
                "completed_at": now,
                "conditions": set_condition(
                    status.conditions, "Failed", "True", final_reason, message, now
                ),
            }
        )
    delay = retry_backoff(failures, jitter, backoff_base, backoff_cap)
    return status.model_copy(update=common | {"phase": Phase.QUEUED, "backoff_seconds": delay})


def release(
    status: JobStatus,
    now: dt.datetime,
    worker: str,
    token: str,
    *,
    seq: int,
    progress: Progress | None = None,
) -> Decision:
    """Leased → Queued at once (graceful stop); the attempt is given back (see the budget).

    `progress`, when given, is the checkpoint the next attempt resumes from."""
    del now  # part of the uniform signature; a release has no time-dependent effect
    if refusal := _holder_check(status, worker, token):
        return refusal
    update: dict[str, object] = {
        "phase": Phase.QUEUED,
        "lease": None,
        "fence": fence(token, seq),
        "releases": status.releases + 1,
    }
    if progress is not None:
        update["progress"] = progress
    return status.model_copy(update=update)


def reclaim(
    status: JobStatus,
    now: dt.datetime,
    now_mono: float,
    observation: Observation,
    *,
    budget: Budget,
) -> Decision:
    """Leased (observed expired) → Queued, or → Failed when attempts are spent; expiredLeases + 1.

    `now` stamps the status; expiry is judged only from `observation` and `now_mono`.
    """
    phase = status.effective_phase
    if phase.terminal:
        return Refusal(RefusalReason.TERMINAL, f"job is {phase}")
    if phase is not Phase.LEASED or status.lease is None:
        return Refusal(RefusalReason.NOT_LEASED, f"job is {phase}")
    lease = status.lease
    if not observation.matches(lease):
        return Refusal(RefusalReason.RENEWED, "the lease changed since it was observed")
    if not observation.expired(now_mono):
        left = observation.expires_at() - now_mono
        return Refusal(RefusalReason.NOT_EXPIRED, f"{left:.1f} s left")
    message = f"lease of {lease.holder} expired (attempt {status.attempts})"
    error = JobError(
        reason="LeaseExpired", message=message, permanent=False, attempt=status.attempts, time=now
    )
    common: dict[str, object] = {
        "lease": None,
        "fence": fence(lease.token, f"reclaim-{status.attempts}"),
        "expired_leases": status.expired_leases + 1,
        "last_error": error,
    }
    if budget.left(status) <= 0:
        return status.model_copy(
            update=common
            | {
                "phase": Phase.FAILED,
                "completed_at": now,
                "conditions": set_condition(
                    status.conditions, "Failed", "True", "AttemptsExhausted", message, now
                ),
            }
        )
    return status.model_copy(update=common | {"phase": Phase.QUEUED})


def cancel(status: JobStatus, now: dt.datetime, *, reason: str, message: str) -> Decision:
    """Any non-terminal phase → Cancelled; the lease is cleared, so its holder loses it."""
    phase = status.effective_phase
    if phase.terminal:
        return Refusal(RefusalReason.TERMINAL, f"job is {phase}")
    update: dict[str, object] = {
        "phase": Phase.CANCELLED,
        "lease": None,
        "offer": None,
        "backoff_seconds": None,
        "completed_at": now,
        "conditions": set_condition(status.conditions, "Cancelled", "True", reason, message, now),
    }
    if status.lease is not None:
        update["fence"] = fence(status.lease.token, f"cancel-{status.attempts}")
    return status.model_copy(update=update)


def exhaust(status: JobStatus, now: dt.datetime, *, budget: Budget) -> Decision:
    """Queued with no attempts left → Failed. Heals a job no worker may claim any more."""
    if refusal := _queued_check(status):
        return refusal
    if budget.left(status) > 0:
        return Refusal(RefusalReason.ATTEMPTS_LEFT, f"{budget.left(status)} attempts left")
    message = f"{status.attempts} attempts used"
    return status.model_copy(
        update={
            "phase": Phase.FAILED,
            "offer": None,
            "backoff_seconds": None,
            "completed_at": now,
            "conditions": set_condition(
                status.conditions, "Failed", "True", "AttemptsExhausted", message, now
            ),
        }
    )


def reject(status: JobStatus, now: dt.datetime, *, reason: str, message: str) -> Decision:
    """Queued → Failed, permanently and unleased, with `reason` in lastError: the operator's
    answer to a job no live worker of its pool can do (their registered model is English-only,
    `recall.operator.dispatch.unsupported`); the same failure its worker would write."""
    if refusal := _queued_check(status):
        return refusal
    error = JobError(
        reason=reason, message=message, permanent=True, attempt=status.attempts, time=now
    )
    return status.model_copy(
        update={
            "phase": Phase.FAILED,
            "offer": None,
            "backoff_seconds": None,
            "completed_at": now,
            "last_error": error,
            "conditions": set_condition(status.conditions, "Failed", "True", reason, message, now),
        }
    )


def end_backoff(status: JobStatus) -> Decision:
    """Queued in backoff → claimable, once the observer saw `backoffSeconds` pass on its clock."""
    if refusal := _queued_check(status):
        return refusal
    if status.backoff_seconds is None:
        return Refusal(RefusalReason.NO_BACKOFF)
    return status.model_copy(update={"backoff_seconds": None})


def offer(status: JobStatus, worker: str) -> Decision:
    """Offer a claimable Queued job to an idle `worker` (a hint: any worker may still claim)."""
    if refusal := _queued_check(status):
        return refusal
    if status.backoff_seconds is not None:
        return Refusal(RefusalReason.BACKOFF)
    if status.offer is not None and status.offer.worker == worker:
        return Refusal(RefusalReason.UNCHANGED, f"already offered to {worker}")
    return status.model_copy(update={"offer": Offer(worker=worker)})


def withdraw(status: JobStatus) -> Decision:
    """Take an offer back (its worker went away or did not claim in time)."""
    if refusal := _queued_check(status):
        return refusal
    if status.offer is None:
        return Refusal(RefusalReason.UNCHANGED, "no offer")
    return status.model_copy(update={"offer": None})


def publish(status: JobStatus, now: dt.datetime, *, published: Published) -> Decision:
    """Succeeded → the same, with the record that its outputs and index entry are written:
    the one write a final job takes, once."""
    if status.effective_phase is not Phase.SUCCEEDED:
        return Refusal(RefusalReason.NOT_SUCCEEDED, f"phase {status.effective_phase}")
    if status.published is not None:
        return Refusal(RefusalReason.PUBLISHED, f"published at {status.published.time}")
    return status.model_copy(update={"published": published.model_copy(update={"time": now})})
