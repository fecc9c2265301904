"""The lease core, exhaustively: every action from every state, plus the arithmetic around it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pytest

from recall import lease
from recall.lease import Observation, Refusal, RefusalReason
from recall.models import JobStatus, Lease, Phase, Progress, Result

NOW = dt.datetime(2026, 11, 29, 12, 0, 0, tzinfo=dt.UTC)
ME, TOKEN = "worker-a", "a" * 32
OTHER, OTHER_TOKEN = "worker-b", "b" * 32
MAX = 5


def leased(holder: str = ME, token: str = TOKEN, attempts: int = 1, **kw: object) -> JobStatus:
    return JobStatus(
        phase=Phase.LEASED,
        lease=Lease(
            holder=holder, token=token, acquire_time=NOW, renew_time=NOW, duration_seconds=10
        ),
        attempts=attempts,
        **kw,  # type: ignore[arg-type]
    )


STATES: dict[str, JobStatus] = {
    "new": JobStatus(),
    "queued": JobStatus(phase=Phase.QUEUED, attempts=1),
    "leased-mine": leased(),
    "leased-other-holder": leased(holder=OTHER, token=OTHER_TOKEN),
    "leased-mine-new-token": leased(token=OTHER_TOKEN, attempts=2),
    "succeeded": JobStatus(phase=Phase.SUCCEEDED, attempts=1, result=Result(config_map="cm")),
    "failed": JobStatus(phase=Phase.FAILED, attempts=5),
    "cancelled": JobStatus(phase=Phase.CANCELLED),
}

OBSERVED = Observation(token=TOKEN, renew_time=NOW, duration_seconds=10, observed_at=100.0)

ACTIONS: dict[str, Callable[[JobStatus], lease.Decision]] = {
    "claim": lambda s: lease.claim(s, NOW, ME, TOKEN, lease_seconds=10, max_attempts=MAX),
    "renew": lambda s: lease.renew(s, NOW, ME, TOKEN),
    "complete": lambda s: lease.complete(s, NOW, ME, TOKEN, result=Result(config_map="cm")),
    "fail-retriable": lambda s: lease.fail(
        s, NOW, ME, TOKEN, reason="X", message="m", permanent=False, max_attempts=MAX, jitter=0.5
    ),
    "fail-permanent": lambda s: lease.fail(
        s, NOW, ME, TOKEN, reason="Bad", message="m", permanent=True, max_attempts=MAX, jitter=0.5
    ),
    "release": lambda s: lease.release(s, NOW, ME, TOKEN),
    "reclaim-expired": lambda s: lease.reclaim(s, NOW, 110.0, OBSERVED, max_attempts=MAX),
    "reclaim-not-expired": lambda s: lease.reclaim(s, NOW, 109.0, OBSERVED, max_attempts=MAX),
    "cancel": lambda s: lease.cancel(s, NOW, reason="BatchDeleted", message="m"),
}

R = RefusalReason
# Expected outcome of every action from every state: a resulting phase, or a refusal reason.
EXPECTED: dict[str, dict[str, Phase | RefusalReason]] = {
    "new": {
        "claim": Phase.LEASED,
        "renew": R.NOT_LEASED,
        "complete": R.NOT_LEASED,
        "fail-retriable": R.NOT_LEASED,
        "fail-permanent": R.NOT_LEASED,
        "release": R.NOT_LEASED,
        "reclaim-expired": R.NOT_LEASED,
        "reclaim-not-expired": R.NOT_LEASED,
        "cancel": Phase.CANCELLED,
    },
    "queued": {
        "claim": Phase.LEASED,
        "renew": R.NOT_LEASED,
        "complete": R.NOT_LEASED,
        "fail-retriable": R.NOT_LEASED,
        "fail-permanent": R.NOT_LEASED,
        "release": R.NOT_LEASED,
        "reclaim-expired": R.NOT_LEASED,
        "reclaim-not-expired": R.NOT_LEASED,
        "cancel": Phase.CANCELLED,
    },
    "leased-mine": {
        "claim": R.NOT_QUEUED,
        "renew": Phase.LEASED,
        "complete": Phase.SUCCEEDED,
        "fail-retriable": Phase.QUEUED,
        "fail-permanent": Phase.FAILED,
        "release": Phase.QUEUED,
        "reclaim-expired": Phase.QUEUED,
        "reclaim-not-expired": R.NOT_EXPIRED,
        "cancel": Phase.CANCELLED,
    },
    "leased-other-holder": {
        "claim": R.NOT_QUEUED,
        "renew": R.NOT_HOLDER,
        "complete": R.NOT_HOLDER,
        "fail-retriable": R.NOT_HOLDER,
        "fail-permanent": R.NOT_HOLDER,
        "release": R.NOT_HOLDER,
        "reclaim-expired": R.RENEWED,
        "reclaim-not-expired": R.RENEWED,
        "cancel": Phase.CANCELLED,
    },
    "leased-mine-new-token": {
        "claim": R.NOT_QUEUED,
        "renew": R.TOKEN_MISMATCH,
        "complete": R.TOKEN_MISMATCH,
        "fail-retriable": R.TOKEN_MISMATCH,
        "fail-permanent": R.TOKEN_MISMATCH,
        "release": R.TOKEN_MISMATCH,
        "reclaim-expired": R.RENEWED,
        "reclaim-not-expired": R.RENEWED,
        "cancel": Phase.CANCELLED,
    },
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
    assert decision.phase == expected
    # Invariants every accepted transition keeps.
    assert decision.attempts >= before.attempts
    assert decision.expired_leases >= before.expired_leases
    assert (decision.phase == Phase.LEASED) == (decision.lease is not None)
    if decision.phase == Phase.SUCCEEDED:
        assert decision.result is not None


def test_claim__binds_token_and_counts_attempt() -> None:
    s = lease.claim(STATES["queued"], NOW, ME, TOKEN, lease_seconds=30, max_attempts=MAX)
    assert isinstance(s, JobStatus)
    assert s.lease is not None
    assert (s.lease.holder, s.lease.token, s.lease.duration_seconds) == (ME, TOKEN, 30)
    assert s.attempts == 2
    assert s.started_at == NOW


def test_claim__refused_during_backoff_and_allowed_after() -> None:
    s = JobStatus(phase=Phase.QUEUED, not_before=NOW + dt.timedelta(seconds=5))
    early = lease.claim(s, NOW, ME, TOKEN, lease_seconds=10, max_attempts=MAX)
    assert isinstance(early, Refusal) and early.reason == R.BACKOFF
    later = lease.claim(
        s, NOW + dt.timedelta(seconds=5), ME, TOKEN, lease_seconds=10, max_attempts=MAX
    )
    assert isinstance(later, JobStatus) and later.not_before is None


def test_claim__refused_when_suspended() -> None:
    d = lease.claim(JobStatus(), NOW, ME, TOKEN, lease_seconds=10, max_attempts=MAX, suspended=True)
    assert isinstance(d, Refusal) and d.reason == R.SUSPENDED


def test_claim__refused_when_attempts_spent_but_releases_give_them_back() -> None:
    spent = JobStatus(phase=Phase.QUEUED, attempts=MAX)
    d = lease.claim(spent, NOW, ME, TOKEN, lease_seconds=10, max_attempts=MAX)
    assert isinstance(d, Refusal) and d.reason == R.ATTEMPTS_EXHAUSTED
    released = spent.model_copy(update={"releases": 1})
    assert isinstance(
        lease.claim(released, NOW, ME, TOKEN, lease_seconds=10, max_attempts=MAX), JobStatus
    )


def test_renew__moves_renew_time_and_records_progress() -> None:
    later = NOW + dt.timedelta(seconds=3)
    s = lease.renew(leased(), later, ME, TOKEN, progress=Progress.of(2, 6, "cm"))
    assert isinstance(s, JobStatus) and s.lease is not None
    assert s.lease.renew_time == later and s.lease.acquire_time == NOW
    assert s.progress == Progress.of(2, 6, "cm")


def test_renew__rejected_after_reclaim() -> None:
    reclaimed = lease.reclaim(leased(), NOW, 111.0, OBSERVED, max_attempts=MAX)
    assert isinstance(reclaimed, JobStatus)
    d = lease.renew(reclaimed, NOW, ME, TOKEN)
    assert isinstance(d, Refusal) and d.reason == R.NOT_LEASED


def test_complete__clears_lease_and_keeps_checkpoint() -> None:
    s = lease.complete(
        leased(progress=Progress.of(4, 6, "cm")), NOW, ME, TOKEN, result=Result(config_map="t")
    )
    assert isinstance(s, JobStatus)
    assert s.lease is None and s.completed_at == NOW
    assert s.progress == Progress.of(6, 6, "cm")
    assert any(c.type == "Complete" and c.status == "True" for c in s.conditions)


def test_fail__retriable_sets_backoff_and_counts_failure() -> None:
    s = lease.fail(
        leased(),
        NOW,
        ME,
        TOKEN,
        reason="Timeout",
        message="m",
        permanent=False,
        max_attempts=MAX,
        jitter=0.0,
    )
    assert isinstance(s, JobStatus)
    assert s.phase == Phase.QUEUED and s.failures == 1 and s.lease is None
    assert s.not_before == NOW + dt.timedelta(seconds=lease.retry_backoff(1, 0.0))
    assert s.last_error is not None and s.last_error.reason == "Timeout"


def test_fail__on_last_attempt_is_final() -> None:
    s = lease.fail(
        leased(attempts=MAX),
        NOW,
        ME,
        TOKEN,
        reason="Timeout",
        message="m",
        permanent=False,
        max_attempts=MAX,
        jitter=0.0,
    )
    assert isinstance(s, JobStatus) and s.phase == Phase.FAILED
    assert any(c.reason == "AttemptsExhausted" for c in s.conditions)


def test_fail__permanent_keeps_reason() -> None:
    s = lease.fail(
        leased(),
        NOW,
        ME,
        TOKEN,
        reason="SourceNotFound",
        message="no file",
        permanent=True,
        max_attempts=MAX,
        jitter=0.0,
    )
    assert isinstance(s, JobStatus) and s.phase == Phase.FAILED
    assert s.last_error is not None and s.last_error.permanent
    assert any(c.reason == "SourceNotFound" for c in s.conditions)


def test_release__gives_the_attempt_back() -> None:
    s = lease.release(leased(attempts=3), NOW, ME, TOKEN)
    assert isinstance(s, JobStatus)
    assert (s.phase, s.attempts, s.releases, s.not_before) == (Phase.QUEUED, 3, 1, None)


def test_reclaim__counts_expired_lease_separately_from_failures() -> None:
    s = lease.reclaim(leased(failures=1), NOW, 110.0, OBSERVED, max_attempts=MAX)
    assert isinstance(s, JobStatus)
    assert (s.expired_leases, s.failures) == (1, 1)
    assert s.last_error is not None and s.last_error.reason == "LeaseExpired"


def test_reclaim__on_last_attempt_fails_the_job() -> None:
    s = lease.reclaim(leased(attempts=MAX), NOW, 110.0, OBSERVED, max_attempts=MAX)
    assert isinstance(s, JobStatus) and s.phase == Phase.FAILED


def test_reclaim__refused_when_renewed_since_observed() -> None:
    renewed = lease.renew(leased(), NOW + dt.timedelta(seconds=1), ME, TOKEN)
    assert isinstance(renewed, JobStatus)
    d = lease.reclaim(renewed, NOW, 200.0, OBSERVED, max_attempts=MAX)
    assert isinstance(d, Refusal) and d.reason == R.RENEWED


def test_exhaust__fails_a_queued_job_without_attempts() -> None:
    s = lease.exhaust(JobStatus(phase=Phase.QUEUED, attempts=MAX), NOW, max_attempts=MAX)
    assert isinstance(s, JobStatus) and s.phase == Phase.FAILED
    left = lease.exhaust(JobStatus(phase=Phase.QUEUED, attempts=1), NOW, max_attempts=MAX)
    assert isinstance(left, Refusal)


@pytest.mark.parametrize(
    ("failures", "jitter", "expected"),
    [
        (1, 0.0, 2.5),
        (1, 0.999999, 5.0),
        (2, 0.0, 5.0),
        (3, 0.0, 10.0),
        (20, 0.0, 150.0),
    ],
)
def test_retry_backoff__exponential_capped_jittered(
    failures: int, jitter: float, expected: float
) -> None:
    assert lease.retry_backoff(failures, jitter) == pytest.approx(expected, rel=1e-5)


def test_new_token__random_and_long() -> None:
    tokens = {lease.new_token() for _ in range(1000)}
    assert len(tokens) == 1000
    assert all(len(t) == 32 for t in tokens)
