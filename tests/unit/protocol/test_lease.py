"""The lease core, exhaustively: every action from every state, plus the arithmetic around it.

Every accepted transition must also pass the CRD's transition rules (as the memory store
mirrors them): the protocol never asks the API server for something it refuses.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pytest

from recall.protocol import lease
from recall.protocol.lease import Budget, Refusal, RefusalReason
from recall.protocol.observer import Observation
from recall.resources import JobStatus, Lease, Offer, Part, Phase, Progress, Result
from recall_dev.twin.rules import job_status_rules

NOW = dt.datetime(2026, 11, 29, 12, 0, 0, tzinfo=dt.UTC)
ME, TOKEN = "worker-a", "a" * 32
KEY = f"scratch/ns/job/uid/a1-{TOKEN}/transcript.json"
PARTS = [Part(attempt=1, token=TOKEN, first=0, end=2)]
OTHER, OTHER_TOKEN = "worker-b", "b" * 32
MAX = 5
BUDGET = Budget(max_attempts=MAX, max_releases=2)
SPEC = {"maxAttempts": MAX, "maxReleases": 2}


def leased(holder: str = ME, token: str = TOKEN, attempts: int = 1, **kw: object) -> JobStatus:
    return JobStatus(
        phase=Phase.LEASED,
        lease=Lease(
            holder=holder, token=token, acquire_time=NOW, renew_time=NOW, duration_seconds=10
        ),
        fence=f"{token}/1",
        attempts=attempts,
        **kw,
    )


def completed(result: Result) -> JobStatus:
    """The leased job completed by its holder ME (write 1) with `result`."""
    s = lease.complete(leased(), NOW, ME, TOKEN, seq=1, result=result)
    assert isinstance(s, JobStatus)
    return s


def fail(
    status: JobStatus, reason: str, *, permanent: bool, message: str = "m", jitter: float = 0.0
) -> lease.Decision:
    """The holder ME fails its lease (write 2) with `reason`."""
    return lease.fail(
        status,
        NOW,
        ME,
        TOKEN,
        seq=2,
        reason=reason,
        message=message,
        permanent=permanent,
        budget=BUDGET,
        jitter=jitter,
    )


STATES: dict[str, JobStatus] = {
    "new": JobStatus(phase=Phase.QUEUED),
    "queued": JobStatus(phase=Phase.QUEUED, attempts=1),
    "queued-offered": JobStatus(phase=Phase.QUEUED, attempts=1, offer=Offer(worker=OTHER)),
    "queued-backoff": JobStatus(phase=Phase.QUEUED, attempts=1, failures=1, backoff_seconds=5),
    "leased-mine": leased(),
    "leased-other-holder": leased(holder=OTHER, token=OTHER_TOKEN),
    "leased-mine-new-token": leased(token=OTHER_TOKEN, attempts=2),
    "succeeded": JobStatus(
        phase=Phase.SUCCEEDED,
        attempts=1,
        result=Result(transcript=KEY, token=TOKEN, attempt=1),
    ),
    "failed": JobStatus(phase=Phase.FAILED, attempts=5),
    "cancelled": JobStatus(phase=Phase.CANCELLED),
}

OBSERVED = Observation(token=TOKEN, renew_time=NOW, duration_seconds=10, observed_at=100.0)

ACTIONS: dict[str, Callable[[JobStatus], lease.Decision]] = {
    "claim": lambda s: lease.claim(s, NOW, ME, TOKEN, lease_seconds=10, budget=BUDGET),
    "renew": lambda s: lease.renew(s, NOW, ME, TOKEN, seq=2),
    "complete": lambda s: lease.complete(s, NOW, ME, TOKEN, seq=2, result=Result(transcript=KEY)),
    "fail-retriable": lambda s: fail(s, "X", permanent=False, jitter=0.5),
    "fail-permanent": lambda s: fail(s, "Bad", permanent=True, jitter=0.5),
    "release": lambda s: lease.release(s, NOW, ME, TOKEN, seq=2),
    "reclaim-expired": lambda s: lease.reclaim(s, NOW, 110.0, OBSERVED, budget=BUDGET),
    "reclaim-not-expired": lambda s: lease.reclaim(s, NOW, 109.0, OBSERVED, budget=BUDGET),
    "cancel": lambda s: lease.cancel(s, NOW, reason="BatchDeleted", message="m"),
    "end-backoff": lease.end_backoff,
    "offer": lambda s: lease.offer(s, ME),
    "reject": lambda s: lease.reject(s, NOW, reason="TranslationUnsupported", message="m"),
}

R = RefusalReason
HOLDER_ACTIONS = ("renew", "complete", "fail-retriable", "fail-permanent", "release")


def queued(**over: Phase | RefusalReason) -> dict[str, Phase | RefusalReason]:
    base: dict[str, Phase | RefusalReason] = {
        "claim": Phase.LEASED,
        **dict.fromkeys(HOLDER_ACTIONS, R.NOT_LEASED),
        "reclaim-expired": R.NOT_LEASED,
        "reclaim-not-expired": R.NOT_LEASED,
        "cancel": Phase.CANCELLED,
        "end-backoff": R.NO_BACKOFF,
        "offer": Phase.QUEUED,
        "reject": Phase.FAILED,
    }
    return base | over


def leased_by(
    holder_refusal: RefusalReason | None, reclaim: RefusalReason | None
) -> dict[str, Phase | RefusalReason]:
    out: dict[str, Phase | RefusalReason] = {
        "claim": R.NOT_QUEUED,
        "renew": Phase.LEASED,
        "complete": Phase.SUCCEEDED,
        "fail-retriable": Phase.QUEUED,
        "fail-permanent": Phase.FAILED,
        "release": Phase.QUEUED,
        "reclaim-expired": Phase.QUEUED,
        "reclaim-not-expired": R.NOT_EXPIRED,
        "cancel": Phase.CANCELLED,
        "end-backoff": R.NOT_QUEUED,
        "offer": R.NOT_QUEUED,
        "reject": R.NOT_QUEUED,
    }
    if holder_refusal is not None:
        out |= dict.fromkeys(HOLDER_ACTIONS, holder_refusal)
    if reclaim is not None:
        out |= {"reclaim-expired": reclaim, "reclaim-not-expired": reclaim}
    return out


# Expected outcome of every action from every state: a resulting phase, or a refusal reason.
EXPECTED: dict[str, dict[str, Phase | RefusalReason]] = {
    "new": queued(),
    "queued": queued(),
    "queued-offered": queued(),
    "queued-backoff": queued(claim=R.BACKOFF) | {"end-backoff": Phase.QUEUED, "offer": R.BACKOFF},
    "leased-mine": leased_by(None, None),
    "leased-other-holder": leased_by(R.NOT_HOLDER, R.RENEWED),
    "leased-mine-new-token": leased_by(R.TOKEN_MISMATCH, R.RENEWED),
    **{
        terminal: dict.fromkeys(ACTIONS, R.TERMINAL)
        for terminal in ("succeeded", "failed", "cancelled")
    },
}


@pytest.mark.parametrize("state", list(STATES))
@pytest.mark.parametrize("action", list(ACTIONS))
def test_every_action_from_every_state(state: str, action: str) -> None:
    before = STATES[state]
    decision = ACTIONS[action](before)
    expected = EXPECTED[state][action]
    if isinstance(expected, RefusalReason):
        assert isinstance(decision, Refusal), f"{action} from {state} should be refused"
        assert decision.reason == expected
        return
    assert isinstance(decision, JobStatus), f"{action} from {state} refused: {decision}"
    assert decision.effective_phase == expected
    broken = job_status_rules(before.to_api(), decision.to_api(), SPEC)
    assert broken == [], f"{action} from {state} breaks the CRD rules: {broken}"


def test_claim__binds_token_counts_attempt_and_uses_the_offer() -> None:
    s = lease.claim(STATES["queued-offered"], NOW, ME, TOKEN, lease_seconds=30, budget=BUDGET)
    assert isinstance(s, JobStatus) and s.lease is not None
    assert (s.lease.holder, s.lease.token, s.lease.duration_seconds) == (ME, TOKEN, 30)
    assert (s.attempts, s.started_at, s.offer, s.fence) == (2, NOW, None, f"{TOKEN}/1")


def test_claim__refused_when_suspended() -> None:
    d = lease.claim(JobStatus(), NOW, ME, TOKEN, lease_seconds=10, budget=BUDGET, suspended=True)
    assert isinstance(d, Refusal) and d.reason == R.SUSPENDED


def test_claim__releases_give_attempts_back_up_to_max_releases() -> None:
    spent = JobStatus(phase=Phase.QUEUED, attempts=MAX)
    d = lease.claim(spent, NOW, ME, TOKEN, lease_seconds=10, budget=BUDGET)
    assert isinstance(d, Refusal) and d.reason == R.ATTEMPTS_EXHAUSTED
    one_back = spent.model_copy(update={"releases": 1})
    assert isinstance(
        lease.claim(one_back, NOW, ME, TOKEN, lease_seconds=10, budget=BUDGET), JobStatus
    )
    # Beyond maxReleases a release no longer gives its attempt back: endless evictions end.
    capped = JobStatus(phase=Phase.QUEUED, attempts=MAX + 2, releases=50)
    d = lease.claim(capped, NOW, ME, TOKEN, lease_seconds=10, budget=BUDGET)
    assert isinstance(d, Refusal) and d.reason == R.ATTEMPTS_EXHAUSTED
    assert BUDGET.left(capped) == 0


def test_every_write_of_a_lease_presents_its_token_with_a_fresh_suffix() -> None:
    status = leased()
    fences = {status.fence}
    for seq in range(2, 6):
        status = lease.renew(status, NOW, ME, TOKEN, seq=seq)  # type: ignore[assignment]
        assert isinstance(status, JobStatus) and status.fence is not None
        assert status.fence.startswith(f"{TOKEN}/") and status.fence not in fences
        fences.add(status.fence)


def test_renew__moves_renew_time_and_records_progress() -> None:
    later = NOW + dt.timedelta(seconds=3)
    s = lease.renew(leased(), later, ME, TOKEN, seq=2, progress=Progress.of(2, 6, PARTS))
    assert isinstance(s, JobStatus) and s.lease is not None
    assert s.lease.renew_time == later and s.lease.acquire_time == NOW
    assert s.progress == Progress.of(2, 6, PARTS)


def test_renew__rejected_after_reclaim() -> None:
    reclaimed = lease.reclaim(leased(), NOW, 111.0, OBSERVED, budget=BUDGET)
    assert isinstance(reclaimed, JobStatus)
    d = lease.renew(reclaimed, NOW, ME, TOKEN, seq=2)
    assert isinstance(d, Refusal) and d.reason == R.NOT_LEASED


def test_complete__records_token_and_attempt_in_the_result() -> None:
    s = lease.complete(
        leased(attempts=3, progress=Progress.of(4, 6, PARTS)),
        NOW,
        ME,
        TOKEN,
        seq=7,
        result=Result(transcript=KEY),
    )
    assert isinstance(s, JobStatus) and s.result is not None
    assert (s.result.token, s.result.attempt, s.fence) == (TOKEN, 3, f"{TOKEN}/7")
    assert s.lease is None and s.completed_at == NOW
    assert s.progress == Progress.of(6, 6)  # the transcript holds every chunk now
    assert any(c.type == "Complete" and c.status == "True" for c in s.conditions)


def test_fail__retriable_sets_a_backoff_duration_not_a_time() -> None:
    s = fail(leased(), "Timeout", permanent=False)
    assert isinstance(s, JobStatus)
    assert s.phase == Phase.QUEUED and s.failures == 1 and s.lease is None
    assert s.backoff_seconds == lease.retry_backoff(1, 0.0)
    assert s.last_error is not None and s.last_error.reason == "Timeout"


def test_fail__on_last_attempt_is_final() -> None:
    s = fail(leased(attempts=MAX), "Timeout", permanent=False)
    assert isinstance(s, JobStatus) and s.phase == Phase.FAILED
    assert any(c.reason == "AttemptsExhausted" for c in s.conditions)


def test_fail__permanent_keeps_reason() -> None:
    s = fail(leased(), "SourceNotFound", permanent=True, message="no file")
    assert isinstance(s, JobStatus) and s.phase == Phase.FAILED
    assert s.last_error is not None and s.last_error.permanent
    assert any(c.reason == "SourceNotFound" for c in s.conditions)


def test_release__gives_the_attempt_back() -> None:
    s = lease.release(leased(attempts=3), NOW, ME, TOKEN, seq=2)
    assert isinstance(s, JobStatus)
    assert (s.phase, s.attempts, s.releases, s.backoff_seconds) == (Phase.QUEUED, 3, 1, None)


def test_reclaim__counts_expired_lease_separately_from_failures() -> None:
    s = lease.reclaim(leased(failures=1), NOW, 110.0, OBSERVED, budget=BUDGET)
    assert isinstance(s, JobStatus)
    assert (s.expired_leases, s.failures, s.fence) == (1, 1, f"{TOKEN}/reclaim-1")
    assert s.last_error is not None and s.last_error.reason == "LeaseExpired"


def test_reclaim__on_last_attempt_fails_the_job() -> None:
    s = lease.reclaim(leased(attempts=MAX), NOW, 110.0, OBSERVED, budget=BUDGET)
    assert isinstance(s, JobStatus) and s.phase == Phase.FAILED


def test_reclaim__refused_when_renewed_since_observed() -> None:
    renewed = lease.renew(leased(), NOW + dt.timedelta(seconds=1), ME, TOKEN, seq=2)
    assert isinstance(renewed, JobStatus)
    d = lease.reclaim(renewed, NOW, 200.0, OBSERVED, budget=BUDGET)
    assert isinstance(d, Refusal) and d.reason == R.RENEWED


def test_exhaust__fails_a_queued_job_without_attempts() -> None:
    s = lease.exhaust(JobStatus(phase=Phase.QUEUED, attempts=MAX), NOW, budget=BUDGET)
    assert isinstance(s, JobStatus) and s.phase == Phase.FAILED
    left = lease.exhaust(JobStatus(phase=Phase.QUEUED, attempts=1), NOW, budget=BUDGET)
    assert isinstance(left, Refusal) and left.reason == R.ATTEMPTS_LEFT


def test_reject__fails_a_queued_job_with_attempts_left_only_for_a_pool_s_model() -> None:
    s = lease.reject(
        STATES["queued-offered"], NOW, reason="LanguageDetectionUnsupported", message="m"
    )
    assert isinstance(s, JobStatus) and s.phase == Phase.FAILED and s.offer is None
    assert s.last_error is not None and s.last_error.permanent
    assert (s.last_error.reason, s.attempts, s.lease) == ("LanguageDetectionUnsupported", 1, None)
    # The CRD rules take it for these reasons only: any other Queued -> Failed needs spent attempts
    other = lease.reject(STATES["queued"], NOW, reason="SourceNotFound", message="m")
    assert isinstance(other, JobStatus)
    assert job_status_rules(STATES["queued"].to_api(), other.to_api(), SPEC)


def test_offer__and_withdraw() -> None:
    s = lease.offer(STATES["queued"], ME)
    assert isinstance(s, JobStatus) and s.offer == Offer(worker=ME)
    again = lease.offer(s, ME)
    assert isinstance(again, Refusal) and again.reason == R.UNCHANGED
    back = lease.withdraw(s)
    assert isinstance(back, JobStatus) and back.offer is None


@pytest.mark.parametrize(
    ("failures", "jitter", "expected"),
    [(1, 0.0, 2.5), (1, 0.999999, 5.0), (2, 0.0, 5.0), (3, 0.0, 10.0), (20, 0.0, 150.0)],
)
def test_retry_backoff__exponential_capped_jittered(
    failures: int, jitter: float, expected: float
) -> None:
    assert lease.retry_backoff(failures, jitter) == pytest.approx(expected, abs=1e-3)


def test_new_token__random_and_long() -> None:
    tokens = {lease.new_token() for _ in range(1000)}
    assert len(tokens) == 1000
    assert all(len(t) == 32 for t in tokens)


def test_publish__once_on_a_succeeded_job_and_nowhere_else() -> None:
    from recall.resources import Published

    done = lease.complete(leased(), NOW, ME, TOKEN, seq=2, result=Result(transcript=KEY))
    assert isinstance(done, JobStatus)
    record = Published(time=NOW, formats=["srt"])
    published = lease.publish(done, NOW, published=record)
    assert isinstance(published, JobStatus) and published.published is not None
    assert published.model_copy(update={"published": None}) == done  # nothing else changed
    again = lease.publish(published, NOW, published=record)
    assert isinstance(again, Refusal) and again.reason == R.PUBLISHED
    queued = lease.publish(JobStatus(), NOW, published=record)
    assert isinstance(queued, Refusal) and queued.reason == R.NOT_SUCCEEDED
    # The memory store refuses what the CRD refuses: a second record, or one with more in it.
    spec = {"maxAttempts": 5, "maxReleases": 10}
    old, new = done.to_api(), published.to_api()
    assert job_status_rules(old, new, spec) == []
    assert job_status_rules(new, {**new, "published": {"time": "2026-01-01T00:00:00Z"}}, spec)
    assert job_status_rules(old, {**new, "attempts": 9}, spec)
