"""429 answers of API Priority and Fairness: sent again after Retry-After within the request's
own time, then raised with `retry_after` for the caller's backoff."""

from __future__ import annotations

import random
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from recall.kube import Conflict, Unavailable, retry_pause
from recall.kube.http import HttpVerbs
from recall_dev.twin.clock import FakeClock


def throttled(retry_after: str | None = "1") -> ApiException:
    e = ApiException(status=429, reason="Too Many Requests")
    e.headers = {"Retry-After": retry_after} if retry_after is not None else {}
    e.body = '{"message": "too many requests, please try again later"}'
    return e


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def answers(*outcomes: object) -> Any:
    calls: list[float] = []

    def fn(*_args: object, _request_timeout: float, **_kw: object) -> object:
        calls.append(_request_timeout)
        outcome = outcomes[len(calls) - 1]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    fn.calls = calls  # type: ignore[attr-defined]
    return fn


def test_call__a_429_is_sent_again_no_sooner_than_its_retry_after(clock: FakeClock) -> None:
    kc = HttpVerbs(client.ApiClient(), timeout=15.0, clock=clock)
    fn = answers(throttled("1"), throttled("2"), {"ok": True})
    assert kc._call("patch status of job ns/a", fn, write=True) == {"ok": True}
    assert len(fn.calls) == 3
    assert 1.0 <= clock.slept[0] <= 1.5 and 2.0 <= clock.slept[1] <= 3.0
    # every attempt has what is left of the one request's time, not a fresh timeout
    assert fn.calls[0] == 15.0 and fn.calls[2] == pytest.approx(15.0 - sum(clock.slept))


def test_call__a_retry_after_beyond_the_request_time_is_left_to_the_caller(
    clock: FakeClock,
) -> None:
    kc = HttpVerbs(client.ApiClient(), timeout=15.0, clock=clock)
    fn = answers(throttled("30"))
    with pytest.raises(Unavailable) as raised:
        kc._call("patch status of job ns/a", fn, write=True, timeout=2.0)
    error = raised.value
    assert error.throttled and error.retry_after == 30.0 and not error.maybe_applied
    assert clock.slept == [] and len(fn.calls) == 1


def test_call__without_retry_after_backs_off_and_gives_up_at_the_deadline(clock: FakeClock) -> None:
    kc = HttpVerbs(client.ApiClient(), timeout=3.0, clock=clock)
    fn = answers(*[throttled(None)] * 50)
    with pytest.raises(Unavailable):
        kc._call("list jobs", fn, write=False)
    assert sum(clock.slept) < 3.0 and len(fn.calls) >= 3
    assert all(b >= a * 0.9 for a, b in zip(clock.slept, clock.slept[1:], strict=False))


def test_call__other_errors_are_not_retried(clock: FakeClock) -> None:
    kc = HttpVerbs(client.ApiClient(), clock=clock)
    conflict = ApiException(status=409, reason="Conflict")
    fn = answers(conflict)
    with pytest.raises(Conflict):
        kc._call("patch status of job ns/a", fn, write=True)
    assert len(fn.calls) == 1 and clock.slept == []


def test_retry_pause__at_least_the_retry_after_spread_over_half_of_it() -> None:
    rng = random.Random(7)
    error = Unavailable("429", status=429, retry_after=2.0)
    pauses = [retry_pause(error, 0.1, rng=rng) for _ in range(200)]
    assert min(pauses) >= 2.0 and max(pauses) <= 3.0 and max(pauses) - min(pauses) > 0.5
    assert retry_pause(Unavailable("503", status=503), 0.3) == 0.3
    # a starting kube-apiserver's 503 says Retry-After 5 and serves within a second
    assert retry_pause(Unavailable("503", status=503, retry_after=5.0), 0.3) == 0.3
    assert retry_pause(error, 9.0, rng=rng) == 9.0  # the caller's own, longer pause stands


def test_call__a_caller_that_retries_itself_gets_the_429_at_once(clock: FakeClock) -> None:
    # one retry loop per write: a lease holder passes retry=None and backs off on its own
    kc = HttpVerbs(client.ApiClient(), timeout=15.0, clock=clock)
    fn = answers(throttled("1"), {"ok": True})
    with pytest.raises(Unavailable) as raised:
        kc._call("patch status of job ns/a", fn, write=True, retry=None)
    assert raised.value.throttled and raised.value.retry_after == 1.0
    assert clock.slept == [] and len(fn.calls) == 1
