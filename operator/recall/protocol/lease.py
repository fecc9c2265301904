"""The lease protocol as pure functions: claim, renew, complete, fail, release, reclaim, and the
operator's cancel, exhaust, reject, offer and end of backoff.

The worker's transitions are here, the operator's in `lease_operator`, the shared terms
(refusals, budget, tokens and fences, backoff) in `lease_terms`; all are exported here.

Each function takes the job's status as read at resourceVersion R, the time and the caller, and
returns the new status or a `Refusal` saying why the action is not allowed from that state. None
reads a clock or talks to the API server: `recall.fencing` writes the new status guarded by R,
so the check here and the write there are atomic.

Rules (DESIGN §3; the CRD's CEL rules enforce them for every client):
- A worker claims only a Queued job not in backoff, not suspended, with attempts left. A claim
  binds a fresh random token and takes one attempt.
- renew, complete, fail and release require phase Leased, holder = the caller and token = the
  caller's token; anything else means the lease is lost.
- Every write to a leased job presents the token in `status.fence` as `<token>/<suffix>`, the
  suffix never used before on that lease (the holder counts its writes; the operator writes
  `reclaim-<attempt>` or `cancel-<attempt>`). A client without the token cannot change a
  leased job.
- complete records the token and attempt in the result; the result never changes again.
- reclaim requires phase Leased and an expiry the operator observed on its own monotonic clock
  for exactly this lease (same token and renewTime); any renewal since makes it refuse.
- Terminal phases refuse everything but the operator's one `publish` on a Succeeded job (the
  second record of the two-record rule: outputs and index written after Succeeded).
- Retry backoff is a duration (`backoffSeconds`) judged and ended (`end_backoff`) on the
  operator's clock; no two machines' clocks are ever compared.

Attempt budget: `attempts ≤ maxAttempts + min(releases, maxReleases)`. A claim uses one
attempt; a graceful release gives it back, at most `maxReleases` times, so rolling restarts
cannot exhaust a job and an endlessly evicted job still ends.
"""

from __future__ import annotations

import datetime as dt

from recall.protocol.lease_operator import (
    cancel,
    end_backoff,
    exhaust,
    offer,
    publish,
    reclaim,
    reject,
    withdraw,
)
from recall.protocol.lease_terms import (
    Budget,
    Decision,
    Refusal,
    RefusalReason,
    failed,
    fence,
    holder_refusal,
    new_token,
    queued_refusal,
    retry_backoff,
)
from recall.resources import (
    LOW_LANGUAGE_PROBABILITY,
    JobError,
    JobStatus,
    Lease,
    Phase,
    Progress,
    Result,
    set_condition,
)

__all__ = [
    "Budget",
    "Decision",
    "Refusal",
    "RefusalReason",
    "cancel",
    "claim",
    "complete",
    "end_backoff",
    "exhaust",
    "fail",
    "holder_refusal",
    "new_token",
    "offer",
    "publish",
    "reclaim",
    "reject",
    "release",
    "renew",
    "retry_backoff",
    "withdraw",
]


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
    if refusal := queued_refusal(status):
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
    if refusal := holder_refusal(status, worker, token):
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
    """Leased → Succeeded; the result records this lease's token and attempt. `chunks`: the
    exact chunk count, else the last checkpoint's total (which may predate the last chunks)."""
    if refusal := holder_refusal(status, worker, token):
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
    `progress`: the checkpoint the next attempt resumes from (chunks made durable since the last
    renewal)."""
    if refusal := holder_refusal(status, worker, token):
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
        return status.model_copy(update=common | failed(status, now, final_reason, message))
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
    `progress`: the checkpoint the next attempt resumes from."""
    del now  # part of the uniform signature; a release has no time-dependent effect
    if refusal := holder_refusal(status, worker, token):
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
