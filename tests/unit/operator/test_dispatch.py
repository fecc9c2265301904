"""Dispatch: the ready queue's choice (priority, fair share, engines), and the controller
offering jobs to idle registered workers, withdrawing offers nobody takes up."""

from __future__ import annotations

import datetime as dt
import threading
from pathlib import Path
from typing import Any

import pytest

from recall.base.settings import WorkerSettings
from recall.engines.simulated import SimulatedEngine
from recall.operator.dispatch import ReadyQueue
from recall.operator.reconcile.record import JobRecord
from recall.resources import Phase
from recall.worker.holder import LeaseHolder
from recall.worker.loop import Worker
from recall.worker.registration import Registration
from recall_dev.twin.api import MemoryApi
from recall_dev.twin.clock import FakeClock
from tests.unit.fakes import NS, Operator, batch_manifest, claim, job_manifest, result_of


def record(
    name: str,
    *,
    batch: str | None = None,
    index: int = 0,
    priority: int = 0,
    engine: str | None = "simulated",
    phase: Phase = Phase.QUEUED,
    pool: str = "default",
) -> JobRecord:
    return JobRecord(
        namespace=NS,
        name=name,
        uid=name,
        resource_version="1",
        batch=batch,
        item=name,
        index=index,
        phase=phase,
        attempts=0,
        expired_leases=0,
        failures=0,
        releases=0,
        max_attempts=3,
        max_releases=10,
        lease=None,
        backoff_seconds=None,
        offer=None,
        priority=priority,
        created=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        suspended=False,
        engine=engine,
        pool=pool,
        started_at=None,
        completed_at=None,
        error_reason=None,
        error_message=None,
        result=None,
        parts=(),
        published=False,
        output=False,
    )


def test_ready_queue__priority_first_then_the_batch_with_the_fewest_active() -> None:
    q = ReadyQueue(FakeClock(start=0.0))
    for i in range(100):
        q.update(None, record(f"big-{i}", batch="big", index=i))
    for i in range(5):  # the big Batch already has five jobs running
        q.update(None, record(f"run-{i}", batch="big", index=100 + i, phase=Phase.LEASED))
    for i in range(3):
        q.update(None, record(f"small-{i}", batch="small", index=i))
    q.update(None, record("urgent", batch="other", priority=10))
    picks = [q.pick(NS, "simulated") for _ in range(5)]
    assert picks[0] == (NS, "urgent")
    assert picks[1:4] == [(NS, "small-0"), (NS, "small-1"), (NS, "small-2")]
    assert picks[4] == (NS, "big-0")


def test_ready_queue__engines_and_staleness() -> None:
    q = ReadyQueue(FakeClock(start=0.0))
    q.update(None, record("any", engine=None))
    q.update(None, record("sim", engine="simulated"))
    q.update(None, record("oa", engine="openai"))
    assert q.pick(NS, "simulated") == (NS, "sim")
    assert q.pick(NS, "simulated") is None  # never a job that did not ask for it
    old = record("gone", engine="whisper")
    q.update(None, old)
    q.update(old, None)  # deleted: its stale heap entry is skipped
    assert q.pick(NS, "whisper") == (NS, "any")
    assert q.pick(NS, "whisper") is None


def register(store: MemoryApi, worker: str, engine: str = "simulated", **kw: Any) -> Registration:
    r = Registration(store, NS, worker, engine, duration=15, **kw)
    r.renew_once()
    return r


def test_controller__offers_one_job_to_each_idle_worker() -> None:
    store, clock = MemoryApi(), FakeClock()
    store.create_batch(NS, batch_manifest("b", [f"i{i}" for i in range(5)]))
    op = Operator(store, clock)
    op.tick()  # fan-out
    for w in ("w1", "w2", "w3"):
        register(store, w)
    op.tick()
    offers = {
        j["metadata"]["name"]: j["status"]["offer"]["worker"]
        for j in store.list_jobs(NS).items
        if j["status"].get("offer")
    }
    assert sorted(offers.values()) == ["w1", "w2", "w3"]
    assert sorted(offers) == ["b-i0", "b-i1", "b-i2"]
    op.tick()  # nothing new: each worker has its offer
    assert sum(1 for j in store.list_jobs(NS).items if j["status"].get("offer")) == 3


def test_controller__offers_a_worker_of_slots_a_job_per_slot_of_its_own_pool() -> None:
    store, clock = MemoryApi(), FakeClock()
    store.create_batch(NS, batch_manifest("b", [f"i{i}" for i in range(5)]))
    gpu = batch_manifest("g", ["g0", "g1"])
    gpu["spec"]["defaults"]["pool"] = "gpu"
    store.create_batch(NS, gpu)
    op = Operator(store, clock)
    op.tick()  # fan-out
    register(store, "wide", slots=3)
    register(store, "card", pool="gpu", slots=4)
    op.tick()
    offers: dict[str, list[str]] = {}
    for j in store.list_jobs(NS).items:
        if j["status"].get("offer"):
            offers.setdefault(j["status"]["offer"]["worker"], []).append(j["metadata"]["name"])
    assert sorted(offers["wide"]) == ["b-i0", "b-i1", "b-i2"]  # three slots, three offers
    assert sorted(offers["card"]) == ["g-g0", "g-g1"]  # only its pool's jobs


def test_controller__withdraws_offers_not_taken_up_or_to_dead_workers() -> None:
    store, clock = MemoryApi(), FakeClock()
    store.create_job(NS, job_manifest("a"))
    store.create_job(NS, job_manifest("b"))
    op = Operator(store, clock, offer_seconds=5)
    register(store, "slow")
    op.tick()
    assert [j["status"].get("offer") for j in store.list_jobs(NS).items].count(None) == 1
    clock.step(16)  # past the offer and past the registration (not renewed)
    op.tick()
    assert all(not j["status"].get("offer") for j in store.list_jobs(NS).items)


def test_worker__claims_what_it_is_offered(tmp_path: Path) -> None:
    store = MemoryApi(watch_seconds=1.0)
    for i in range(4):
        store.create_job(NS, job_manifest(f"j{i}"))
    op = Operator(store, FakeClock())
    stop = threading.Event()

    def operator_loop() -> None:
        while not stop.wait(0.05):
            op.tick()

    ws = WorkerSettings(
        id="w1",
        engine="simulated",
        idle_exit_seconds=2.0,
        self_serve_seconds=3600,  # only offers
        simulated_record=tmp_path / "r.jsonl",
    )
    worker = Worker(
        store,
        ws,
        SimulatedEngine(chunks=1, chunk_delay_seconds=0),
        namespace=NS,
        results=op.results,
    )
    t = threading.Thread(target=operator_loop)
    t.start()
    try:
        worker.run()
    finally:
        stop.set()
        t.join()
        store.close()
    assert worker.claim_conflicts == 0
    assert all(j["status"]["phase"] == "Succeeded" for j in store.list_jobs(NS).items), store.dump()
    assert store.get_lease(NS, "recall-worker-w1") is None  # unregistered on exit


def test_controller__a_reclaimed_job_is_offered_to_a_live_worker_not_to_its_dead_holder() -> None:
    store, clock = MemoryApi(), FakeClock()
    store.create_job(NS, job_manifest("a"))  # lease 10 s
    op = Operator(store, clock)
    dead, live = register(store, "dead"), register(store, "live")
    op.tick()
    job = store.get_job(NS, "a")
    assert job is not None and job.status.offer is not None
    holder = job.status.offer.worker
    # Whoever got the offer claims it and dies; the other one stays busy-free and renews.
    other = live if holder == "dead" else dead
    LeaseHolder.claim(store, job, holder, renew_deadline_fraction=0.6, clock=clock)
    op.tick()  # the operator observes the lease
    clock.step(11)  # expired; the dead worker's registration (15 s) is still within its time
    other.renew_once()
    op.tick()  # reclaim
    op.tick()  # the cache has seen the job Queued again: an offer
    job = store.get_job(NS, "a")
    assert job is not None and job.status.phase == Phase.QUEUED and job.status.expired_leases == 1
    assert job.status.offer is not None and job.status.offer.worker == other.worker


def offers(store: MemoryApi) -> dict[str, str]:
    return {
        j["metadata"]["name"]: j["status"]["offer"]["worker"]
        for j in store.list_jobs(NS).items
        if j["status"].get("offer")
    }


def claim_offer(store: MemoryApi, clock: FakeClock, worker: str) -> LeaseHolder:
    return claim(store, clock, next(n for n, w in offers(store).items() if w == worker), worker)


def complete(held: LeaseHolder) -> None:
    held.complete(result_of(held))


def worker_w_and_jobs(jobs: int, **settings: Any) -> tuple[MemoryApi, FakeClock, Operator]:
    """The jobs j0, j1 ... on a memory API server, the worker `w` registered, and an operator
    of `settings`."""
    store, clock = MemoryApi(), FakeClock()
    for i in range(jobs):
        store.create_job(NS, job_manifest(f"j{i}"))
    op = Operator(store, clock, **settings)
    register(store, "w")
    return store, clock, op


@pytest.mark.parametrize(
    ("ahead", "first_job_took", "holding_for", "offered_ahead"),
    [
        (2.0, 0.5, 0.5, True),  # short jobs: the next one is offered while it works
        (2.0, 0.5, 2.5, False),  # the job it holds runs long: no offer ahead
        (2.0, 3.0, 0.5, False),  # its jobs take long: only when idle
        (0.0, 0.5, 0.5, False),  # switched off
    ],
)
def test_controller__offers_ahead_only_to_a_worker_whose_jobs_are_short(
    ahead: float, first_job_took: float, holding_for: float, offered_ahead: bool
) -> None:
    store, clock, op = worker_w_and_jobs(4, offer_ahead_seconds=ahead)
    op.tick()
    first = claim_offer(store, clock, "w")
    op.tick()  # holding its first job, whose length it does not know yet: no offer ahead
    assert offers(store) == {}
    clock.step(first_job_took)
    complete(first)
    op.tick()  # idle: an offer
    second = claim_offer(store, clock, "w")
    op.sync()  # the operator sees the claim at once ...
    clock.step(holding_for)
    op.tick()  # ... and dispatches `holding_for` later
    assert (offers(store) != {}) == offered_ahead, store.dump()
    assert store.get_job(NS, second.name).status.phase == Phase.LEASED  # type: ignore[union-attr]


def short_job_done_and_next_claimed(
    store: MemoryApi, clock: FakeClock, op: Operator
) -> LeaseHolder:
    """`w` completes one 0.5 s job and claims the next one it is offered."""
    op.tick()
    first = claim_offer(store, clock, "w")
    op.sync()
    clock.step(0.5)
    complete(first)
    op.tick()
    second = claim_offer(store, clock, "w")
    op.sync()
    return second


def test_controller__an_idle_worker_is_offered_before_one_due_an_offer_ahead() -> None:
    store, clock, op = worker_w_and_jobs(3, offer_ahead_seconds=2)
    short_job_done_and_next_claimed(store, clock, op)  # w holds j1; j2 is left
    register(store, "idle")
    op.tick()
    assert offers(store) == {"j2": "idle"}


def test_controller__one_offer_ahead_per_job_held_even_when_it_is_withdrawn() -> None:
    store, clock, op = worker_w_and_jobs(4, offer_ahead_seconds=10, offer_seconds=2)
    short_job_done_and_next_claimed(store, clock, op)
    op.tick()
    assert list(offers(store).values()) == ["w"]  # the offer ahead
    for _ in range(6):  # the job held runs on; the offer is withdrawn and not made again
        clock.step(1)
        op.tick()
    assert offers(store) == {}


def test_controller__an_offer_ahead_is_withdrawn_for_a_more_urgent_job() -> None:
    store, clock, op = worker_w_and_jobs(3, offer_ahead_seconds=2)
    working = short_job_done_and_next_claimed(store, clock, op)
    op.tick()
    assert offers(store) == {"j2": "w"}  # ahead, while w works on j1
    store.create_job(NS, job_manifest("urgent", priority=10))
    op.tick()
    op.tick()
    assert offers(store) == {}  # j2 is back in the queue: the urgent job goes first
    complete(working)
    op.tick()
    assert offers(store) == {"urgent": "w"}


def test_ready_queue__a_pool_s_jobs_go_only_to_its_workers() -> None:
    q = ReadyQueue(FakeClock(start=0.0))
    q.update(None, record("cpu-0"))
    q.update(None, record("gpu-0", pool="gpu"))
    q.update(None, record("gpu-1", pool="gpu"))
    assert q.pick(NS, "simulated", "gpu") == (NS, "gpu-0")
    assert q.pick(NS, "simulated") == (NS, "cpu-0")
    assert q.pick(NS, "simulated") is None  # the default pool's workers never see gpu-1
    assert q.pick(NS, "simulated", "gpu") == (NS, "gpu-1")


def test_free_slots__one_offer_per_free_slot_workers_with_jobs_first() -> None:
    from recall.operator.dispatch import Capacity, free_slots

    q = ReadyQueue(FakeClock(start=0.0))
    wide = Capacity((NS, "wide"), "simulated", slots=4)
    narrow = Capacity((NS, "narrow"), "simulated", slots=1)
    q.offered_to((NS, "x"), wide.key)  # one of wide's slots has an offer
    offers = free_slots([narrow, wide], q)
    assert offers == [wide, wide, wide, narrow]  # packing: the worker with jobs fills first
    assert q.free(wide.key, 4) == 3 and q.busy() == {wide.key}
