"""Fenced writes: the only way lease state is written (DESIGN §3).

`fenced_write(api, namespace, name, transition, known=...)`:

1. take the job as read at resourceVersion R (the caller's last copy, or a fresh read);
2. ask `transition(job)`, a pure function of `recall.protocol.lease`, for the new status; a
   `Refusal` ends the write (for a lease holder: the lease is lost);
3. PATCH `/status` with the merge patch from the status at R, carrying `resourceVersion: R` (or
   PUT the whole status at R for a write that neither keeps nor ends a lease: `LEASE_WRITES`);
   the API server applies it only if the job is still at R, else answers 409;
4. on 409, read again and go back to 2: a new decision on a new version, not a retry. If the
   lease is still the writer's, the transition decides the same and a new write is sent after
   a short jittered pause (`REDECIDE`, so two writers drift apart); if not, it refuses.

Ambiguous outcomes (DESIGN §3): when the write may have been applied without an answer
(`Unavailable(maybe_applied=True)`: a timeout, a reset, a 5xx after commit), and whenever a
re-read finds the transition refused, the job read back is checked against the write; if it
shows the write (a lease write's fence is unique to it, so it cannot be someone else's), the
result is `applied`. Nothing is ever concluded lost because an answer went missing.

A transient error that cannot have been applied is raised as it is (`Unavailable`); nothing is
retried here. The caller decides how long to keep trying (a lease holder: until its renew
deadline, with `retry=None` so the API client does not retry a 429 under it: one retry loop per
write).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from recall.base import faults, metrics
from recall.base.backoff import Backoff
from recall.base.clock import SYSTEM, Clock
from recall.kube import THROTTLE, Conflict, JobApi, NotFound, RawObject, Unavailable
from recall.kube.patch import apply_merge_patch, merge_patch
from recall.protocol import lease
from recall.resources import JobStatus, TranscriptionJob

Transition = Callable[[TranscriptionJob], lease.Decision]

# The writes that keep or end a lease are merge patches of the status; the other fenced status
# writes (claim, end-backoff, exhaust, publish) replace the status at the version read. API
# Priority and Fairness sees only verbs: the chart's FlowSchema gives the patches their own
# priority level (charts/recall/templates/apf.yaml), shared by the operator's offers and
# withdrawals (one patch per job at the cache's resourceVersion: recall.operator.reconcile.apply).
LEASE_WRITES = frozenset({"renew", "complete", "fail", "release", "reclaim", "cancel"})

# Pause before deciding again after a 409: 5-10 ms, doubling; jittered so two writers drift apart.
REDECIDE = Backoff(initial=0.005, cap=1.0, jitter=1.0)


class Unsettled(Unavailable):
    """A write may have been applied and reading the job back failed too: the outcome is
    unknown. `patches` is what was sent; pass it as `maybe_applied` to the next attempt, which
    settles it by reading."""

    def __init__(self, message: str, patches: list[RawObject]) -> None:
        super().__init__(message, maybe_applied=True)
        self.patches = patches


@dataclass(frozen=True)
class WriteResult:
    """How a fenced write ended. `job`: as written (applied) or last read (refused; None: gone);
    `refusal` is None exactly when the write was applied; `conflicts`: the 409s met."""

    job: TranscriptionJob | None
    refusal: lease.Refusal | None
    conflicts: int = 0
    settled_by_read: bool = False  # an ambiguous outcome was found applied by reading back

    @property
    def applied(self) -> bool:
        return self.refusal is None


def status_patch(old: JobStatus, new: JobStatus) -> RawObject:
    """Merge patch from one status to another, in the API's JSON form."""
    patch = merge_patch(old.to_api(), new.to_api())
    assert isinstance(patch, dict)
    return patch


def visible(job: TranscriptionJob, patches: list[RawObject]) -> bool:
    """True when the job as read shows one of `patches` applied: it carries the patch's fence
    (unique to that write), or, for writes without a fence, the patch changes nothing on it."""
    current = job.status.to_api()
    for patch in patches:
        fence = patch.get("fence")
        if fence is not None:
            if current.get("fence") == fence:
                return True
        elif patch and apply_merge_patch(current, patch) == current:
            return True
    return False


def fenced_write(
    api: JobApi,
    namespace: str,
    name: str,
    transition: Transition,
    *,
    action: str,
    known: TranscriptionJob | None = None,
    attempts: int = 6,
    retry_on_conflict: bool = True,
    clock: Clock = SYSTEM,
    maybe_applied: list[RawObject] | None = None,
    timeout: float | None = None,
    retry: Backoff | None = THROTTLE,
) -> WriteResult:
    """Apply `transition`'s status with a write guarded by the version it was decided on
    (PATCH or PUT: `LEASE_WRITES`). A 409 is decided again after a `REDECIDE` pause on `clock`,
    up to `attempts` decisions; with `retry_on_conflict=False` (a claim) it ends the write as a
    refusal, unless reading back shows the write applied. Raises `Unavailable` for a transient
    error after which the write is known not applied, and for a conflict unresolved after
    `attempts`; `Unsettled` when the outcome could not be read back. `maybe_applied`: patches of
    earlier, unsettled attempts of this write; `timeout`, `retry`: per request (`kube.base`)."""
    job = known
    conflicts = 0
    sent = list(maybe_applied or [])  # every patch that may have been applied
    for attempt in range(attempts):
        if job is None:
            job = api.get_job(namespace, name, timeout=timeout, retry=retry)
            if job is None:
                return _gone(conflicts)
        decided = _decide(job, transition, sent, conflicts, action)
        if isinstance(decided, WriteResult):
            return decided
        sent.append(decided)
        try:
            written = _send(api, namespace, name, job, decided, action, timeout, retry)
            return WriteResult(written, None, conflicts)
        except NotFound:
            return _gone(conflicts)
        except Unavailable as e:
            if not e.maybe_applied:
                raise
            metrics.AMBIGUOUS_WRITES.labels(action=action).inc()
            job = _read_back(api, namespace, name, e, sent, timeout, retry)  # settled at the top
            if job is None:
                return _gone(conflicts)
        except Conflict:
            conflicts += 1
            metrics.CONFLICTS.labels(action=action).inc()
            job = None
            if not retry_on_conflict:
                return _lost_race(api, namespace, name, action, sent, conflicts, timeout, retry)
            clock.sleep(REDECIDE.delay(attempt))
    raise Unavailable(f"{action} {namespace}/{name}: still conflicting after {attempts} tries")


def _decide(
    job: TranscriptionJob,
    transition: Transition,
    sent: list[RawObject],
    conflicts: int,
    action: str,
) -> WriteResult | RawObject:
    """The patch for `job` as read, or the end of the write: found applied, refused, no change."""
    if sent and visible(job, sent):
        return WriteResult(job, None, conflicts, settled_by_read=True)
    decision = transition(job)
    if isinstance(decision, lease.Refusal):
        if conflicts:
            metrics.FENCED_REJECTIONS.labels(action=action, reason=decision.reason).inc()
        return WriteResult(job, decision, conflicts)
    patch = status_patch(job.status, decision)
    if not patch:
        return WriteResult(job, None, conflicts)
    return patch


def _send(
    api: JobApi,
    namespace: str,
    name: str,
    job: TranscriptionJob,
    patch: RawObject,
    action: str,
    timeout: float | None,
    retry: Backoff | None,
) -> TranscriptionJob:
    """One request at the version `job` was read at: a PATCH for the actions of
    `LEASE_WRITES`, else a PUT of the status as read with `patch` applied."""
    if action not in LEASE_WRITES and job.resource_version is not None:
        # the status as read, with the change: fields this version does not know stay
        whole = apply_merge_patch(job.raw_status or job.status.to_api(), patch)
        assert isinstance(whole, dict)
        written = api.replace_job_status(
            namespace, name, job.resource_version, whole, timeout=timeout, retry=retry
        )
    else:
        written = api.patch_job_status(
            namespace, name, job.resource_version, patch, timeout=timeout, retry=retry
        )
    if faults.answer_lost(action):
        raise Unavailable(f"{action}: the answer was lost (injected)", maybe_applied=True)
    return written


def _gone(conflicts: int) -> WriteResult:
    return WriteResult(None, lease.Refusal(lease.RefusalReason.GONE), conflicts)


def _lost_race(
    api: JobApi,
    namespace: str,
    name: str,
    action: str,
    sent: list[RawObject],
    conflicts: int,
    timeout: float | None,
    retry: Backoff | None,
) -> WriteResult:
    """A 409 on a write that does not retry (a claim): someone else won, unless reading back
    shows this write applied after all (its answer was lost before)."""
    job = api.get_job(namespace, name, timeout=timeout, retry=retry)
    if job is None:
        return _gone(conflicts)
    if visible(job, sent):
        return WriteResult(job, None, conflicts, settled_by_read=True)
    metrics.FENCED_REJECTIONS.labels(action=action, reason="Conflict").inc()
    refusal = lease.Refusal(lease.RefusalReason.NOT_QUEUED, "409: another writer won")
    return WriteResult(job, refusal, conflicts)


def _read_back(
    api: JobApi,
    namespace: str,
    name: str,
    cause: Unavailable,
    patches: list[RawObject],
    timeout: float | None,
    retry: Backoff | None,
) -> TranscriptionJob | None:
    """Read the job after an ambiguous write; if even that fails, the outcome stays unknown."""
    try:
        return api.get_job(namespace, name, timeout=timeout, retry=retry)
    except Unavailable:
        raise Unsettled(f"{cause.message} (and the job could not be read back)", patches) from cause
