"""Runtime bugs the chaos runs pointed at, reproduced small (memory store, no cluster).

Each test states what the runtime should do; each failed on the code the chaos run found it in.
"""

from __future__ import annotations

import threading
import time

import pytest

from recall.kube import Unavailable
from recall.worker.holder import LeaseHolder
from recall_dev.twin.api import Fault, MemoryApi
from recall_dev.twin.clock import FakeClock
from tests.unit.fakes import NS, Operator, batch_manifest


def leased_batch_job(lease: int = 10) -> tuple[MemoryApi, FakeClock, Operator]:
    """A one-item Batch whose job is leased by a worker that then goes silent."""
    store, clock = MemoryApi(), FakeClock()
    store.create_batch(NS, batch_manifest("b", ["a"], leaseDurationSeconds=lease))
    op = Operator(store, clock)
    op.tick()
    job = store.get_job(NS, "b-a")
    assert job is not None
    holder = LeaseHolder.claim(store, job, "w1", renew_deadline_fraction=0.6, clock=clock)
    assert isinstance(holder, LeaseHolder)
    op.tick()
    return store, clock, op


def test_reclaim__is_not_counted_as_a_heal() -> None:
    store, clock, op = leased_batch_job()
    clock.step(11)
    reports = op.controller.run_once()  # the cache has not seen the reclaim yet
    assert [job for r in reports for job, *_ in r.reclaimed] == ["b-a"]
    batch = store.get_batch(NS, "b")
    assert batch is not None
    assert not batch.status.heals, [h for r in reports for h in r.heals]
    assert not [e for e in store.list_events(NS) if e.get("reason") == "Healed"]


def test_controller_loop__waits_a_tick_after_a_failed_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    store, clock, op = leased_batch_job()
    clock.step(11)  # the lease is expired on the operator's clock
    store.inject(Fault("get_job", Unavailable("503: etcd is restarting"), times=100_000))
    controller = op.controller
    timeouts: list[float | None] = []  # how long the loop chose to wait each time
    wait = clock.wait

    def noted(event: threading.Event, timeout: float | None) -> bool:
        timeouts.append(timeout)
        return wait(event, timeout)

    monkeypatch.setattr(clock, "wait", noted)
    stop = threading.Event()
    loop = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    loop.start()
    deadline = time.monotonic() + 30
    while not clock.waiters() and loop.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)  # until the loop waits on the test's clock, after its failed tick
    stop.set()
    controller.wake()
    loop.join(timeout=5)
    tick = controller.settings.tick_seconds
    assert timeouts and min(t or tick for t in timeouts) >= tick / 2, (
        f"slept {timeouts[:5]} s between failed ticks (tick {tick} s)"
    )
