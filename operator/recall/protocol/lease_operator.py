"""The operator's transitions of the lease protocol (reclaim, cancel, exhaust, reject, end of
backoff, offer, withdraw, publish), under the rules and contract of `recall.protocol.lease`,
which exports them. None reads a clock: expiry is judged from the operator's own observation
(`recall.protocol.observer`).
"""

from __future__ import annotations

import datetime as dt

from recall.protocol.lease_terms import (
    Budget,
    Decision,
    Refusal,
    RefusalReason,
    failed,
    fence,
    queued_refusal,
)
from recall.protocol.observer import Observation
from recall.resources import JobError, JobStatus, Offer, Phase, Published, set_condition


def reclaim(
    status: JobStatus,
    now: dt.datetime,
    now_mono: float,
    observation: Observation,
    *,
    budget: Budget,
) -> Decision:
    """Leased (observed expired) → Queued, or → Failed when attempts are spent; expiredLeases + 1.
    Expiry is judged only from `observation` and `now_mono`; `now` stamps the status."""
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
        return status.model_copy(update=common | failed(status, now, "AttemptsExhausted", message))
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
    if refusal := queued_refusal(status):
        return refusal
    if budget.left(status) > 0:
        return Refusal(RefusalReason.ATTEMPTS_LEFT, f"{budget.left(status)} attempts left")
    message = f"{status.attempts} attempts used"
    unoffered = {"offer": None, "backoff_seconds": None}
    return status.model_copy(update=unoffered | failed(status, now, "AttemptsExhausted", message))


def reject(status: JobStatus, now: dt.datetime, *, reason: str, message: str) -> Decision:
    """Queued → Failed, permanently and unleased, with `reason` in lastError as its worker would
    write it: for a job no live worker of its pool can do (`recall.operator.dispatch`)."""
    if refusal := queued_refusal(status):
        return refusal
    error = JobError(
        reason=reason, message=message, permanent=True, attempt=status.attempts, time=now
    )
    unoffered = {"offer": None, "backoff_seconds": None, "last_error": error}
    return status.model_copy(update=unoffered | failed(status, now, reason, message))


def end_backoff(status: JobStatus) -> Decision:
    """Queued in backoff → claimable, once the observer saw `backoffSeconds` pass on its clock."""
    if refusal := queued_refusal(status):
        return refusal
    if status.backoff_seconds is None:
        return Refusal(RefusalReason.NO_BACKOFF)
    return status.model_copy(update={"backoff_seconds": None})


def offer(status: JobStatus, worker: str) -> Decision:
    """Offer a claimable Queued job to an idle `worker` (a hint: any worker may still claim)."""
    if refusal := queued_refusal(status):
        return refusal
    if status.backoff_seconds is not None:
        return Refusal(RefusalReason.BACKOFF)
    if status.offer is not None and status.offer.worker == worker:
        return Refusal(RefusalReason.UNCHANGED, f"already offered to {worker}")
    return status.model_copy(update={"offer": Offer(worker=worker)})


def withdraw(status: JobStatus) -> Decision:
    """Take an offer back (its worker went away or did not claim in time)."""
    if refusal := queued_refusal(status):
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
