"""The one clock and the one backoff: what the runtime's waits and retries rest on."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest

from recall.base.backoff import Backoff
from recall.base.clock import SYSTEM
from recall_dev.twin.clock import EPOCH, FakeClock


def test_fake_clock__wall_follows_monotonic_and_sleep_moves_it() -> None:
    clock = FakeClock()
    assert clock.now() == EPOCH
    clock.step(1.5)
    clock.sleep(2.0)
    assert clock.monotonic() == 1003.5
    assert (clock.now() - EPOCH).total_seconds() == 3.5
    assert clock.slept == [2.0]
    clock.set(900.0)  # never backwards
    assert clock.monotonic() == 1003.5


def test_fake_clock__wait_returns_when_the_test_moves_time_past_it() -> None:
    clock, event = FakeClock(), threading.Event()
    answers: list[bool] = []
    waiter = threading.Thread(target=lambda: answers.append(clock.wait(event, 10.0)))
    waiter.start()
    deadline = time.monotonic() + 30
    while not clock.waiters() and time.monotonic() < deadline:
        time.sleep(0.001)
    clock.step(9.9)
    assert waiter.is_alive()
    clock.step(0.1)
    waiter.join(5)
    assert answers == [False]


def test_fake_clock__wait_returns_true_once_the_event_is_set() -> None:
    clock, event = FakeClock(), threading.Event()
    answers: list[bool] = []
    waiter = threading.Thread(target=lambda: answers.append(clock.wait(event, None)))
    waiter.start()
    event.set()
    waiter.join(5)
    assert answers == [True]
    assert clock.waiters() == 0


def test_system_clock__monotonic_counts_and_wait_times_out() -> None:
    before = SYSTEM.monotonic()
    assert not SYSTEM.wait(threading.Event(), 0.01)
    assert SYSTEM.monotonic() >= before + 0.01
    assert SYSTEM.now().tzinfo is not None


def test_backoff__exponential_then_capped() -> None:
    b = Backoff(initial=1.0, cap=30.0)
    assert [b.delay(n) for n in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    assert b.delay(10_000) == 30  # no overflow far past the cap


def test_backoff__jitter_stretches_never_shortens() -> None:
    b = Backoff(initial=0.5, cap=5.0, jitter=1.0)
    rng = random.Random(7)
    delays = [b.delay(2, rng=rng) for _ in range(200)]
    assert all(2.0 <= d < 4.0 for d in delays)
    assert len(set(delays)) > 100
    assert b.delay(2, u=0.5) == 3.0


def test_backoff__steps_bound_the_retries() -> None:
    b = Backoff(initial=1.0, cap=4.0, steps=3)
    assert list(b.delays()) == [1, 2, 4]
    assert b.exhausted(3) and not b.exhausted(2)
    assert not Backoff(initial=1.0, cap=4.0).exhausted(10**6)


@pytest.mark.parametrize(
    "kw",
    [
        {"initial": 0.0, "cap": 1.0},
        {"initial": 2.0, "cap": 1.0},
        {"initial": 1.0, "cap": 2.0, "factor": 0.5},
    ],
)
def test_backoff__refuses_a_shape_that_cannot_back_off(kw: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="backoff"):
        Backoff(**kw)
