"""The worker's side of a drain (`recall.worker.drain`) with its registration Lease on the memory
store: answered drained only between jobs, answered busy while a job is held (in any of a
worker's slots), cancelled by removing the request; a drained worker picks nothing and is not
ready."""

from __future__ import annotations

import threading
import time

from recall.base.settings import WorkerSettings
from recall.engines.simulated import SimulatedEngine
from recall.protocol.workers import (
    ANNOTATION_DRAIN,
    BUSY,
    DRAINING,
    IDLE,
    Registered,
    lease_name,
    read,
    with_drain,
)
from recall.resources import Phase
from recall.worker.drain import Drain
from recall.worker.health import Liveness
from recall.worker.loop import Worker
from recall.worker.registration import Registration
from recall_dev.twin.api import MemoryApi
from tests.helpers import wait_for
from tests.unit.fakes import NS, job_manifest, memory_bucket


def registered(store: MemoryApi, drain: Drain, worker: str = "w1") -> Registration:
    registration = Registration(store, NS, worker, "simulated", drain=drain)
    registration.renew_once()
    return registration


def ask(store: MemoryApi, request: str | None, worker: str = "w1") -> None:
    """What the operator writes: the request on the Lease, at the version it read."""
    lease = store.get_lease(NS, lease_name(worker))
    assert lease is not None
    store.replace_lease(NS, lease_name(worker), with_drain(lease, request))


def record(store: MemoryApi, worker: str = "w1") -> Registered:
    lease = store.get_lease(NS, lease_name(worker))
    assert lease is not None
    return read(lease)


def test_drain__an_idle_worker_answers_drained_and_closes_its_turns_until_cancelled() -> None:
    drain = Drain("w1", wait=0.0)
    assert drain.answer(None) == (IDLE, None)
    assert drain.answer("r1") == (DRAINING, "r1=drained")
    assert drain.draining()
    with drain.turn() as open_:
        assert not open_
    assert drain.answer("r1") == (DRAINING, "r1=drained"), "the same request, the same answer"
    assert drain.answer(None) == (IDLE, None)
    with drain.turn() as open_:
        assert open_


def test_drain__a_worker_in_a_turn_answers_busy_and_stays_open() -> None:
    drain = Drain("w1", wait=0.05)
    holding, release = threading.Event(), threading.Event()

    def work() -> None:
        with drain.turn() as open_:
            assert open_
            holding.set()
            release.wait(5)

    t = threading.Thread(target=work)
    t.start()
    holding.wait(5)
    try:
        assert drain.answer("r1") == (BUSY, "r1=busy")
        assert drain.answer(None) == (BUSY, None)
        assert not drain.draining()
    finally:
        release.set()
        t.join(5)
    assert drain.answer("r1") == (DRAINING, "r1=drained"), "asked again once idle"


def test_registration__carries_the_answer_and_keeps_the_operators_request() -> None:
    store = MemoryApi()
    drain = Drain("w1", wait=0.0)
    registration = registered(store, drain)
    first = record(store)
    assert (first.state, first.drain, first.answered) == (IDLE, None, None)
    ask(store, "r1")
    registration.renew_once()
    seen = record(store)
    assert seen.drained and seen.state == DRAINING
    lease = store.get_lease(NS, lease_name("w1"))
    assert lease is not None
    assert lease["metadata"]["annotations"][ANNOTATION_DRAIN] == "r1", "kept by the worker"
    ask(store, None)
    registration.renew_once()
    after = record(store)
    assert (after.state, after.drain, after.answered) == (IDLE, None, None)
    assert not drain.draining()


def test_registration__a_request_written_between_read_and_write_is_answered_next_time() -> None:
    store = MemoryApi()
    drain = Drain("w1", wait=0.0)
    registration = registered(store, drain)
    real_get = store.get_lease

    def get_then_the_operator_writes(namespace: str, name: str) -> object:
        lease = real_get(namespace, name)
        store.get_lease = real_get  # type: ignore[method-assign]
        ask(store, "r1")  # lands after the worker's read: its replace must fail (409)
        return lease

    store.get_lease = get_then_the_operator_writes  # type: ignore[assignment,method-assign]
    registration.renew_once()  # the 409 is swallowed; the request survives
    assert record(store).drain == "r1" and record(store).answered is None
    registration.renew_once()
    assert record(store).drained


def test_worker__drained_picks_nothing_and_is_not_ready() -> None:
    store = MemoryApi()
    settings = WorkerSettings(id="w1", engine="simulated", self_serve_seconds=0.01)
    worker = Worker(
        store, settings, SimulatedEngine(chunks=1), namespace=NS, results=memory_bucket()
    )
    liveness = Liveness()
    liveness.draining = worker.drain.draining
    liveness.beat()
    assert worker.registration is not None
    worker.registration.renew_once()
    assert liveness.ready()
    ask(store, "r1")
    worker.registration.renew_once()
    assert not liveness.ready(), "/readyz answers 503 while drained"
    store.create_job(NS, job_manifest("j1"))
    for _ in range(2):
        assert worker.run_once() is False  # each turn waits a second for a cancellation
    job = store.get_job(NS, "j1")
    assert job is not None and job.status.phase == Phase.QUEUED and job.status.attempts == 0
    ask(store, None)
    worker.registration.renew_once()
    assert liveness.ready()
    with worker.drain.turn() as open_:
        assert open_


def test_worker_of_slots__busy_while_any_slot_holds_a_lease_drained_once_every_slot_is_free() -> (
    None
):
    """The real loop with two slots, a short job and a long one: asked while both are leased,
    then while only the long one is, the worker answers busy and stays ready; once both are
    done it answers drained, is not ready, and claims nothing until the request is removed."""
    store = MemoryApi(watch_seconds=1.0)
    settings = WorkerSettings(id="w1", engine="simulated", self_serve_seconds=0.05, slots=2)
    liveness = Liveness()
    worker = Worker(
        store, settings, SimulatedEngine(), namespace=NS, results=memory_bucket(),
        beat=liveness.beat,
    )  # fmt: skip
    liveness.draining = worker.drain.draining
    registration = worker.registration
    assert registration is not None

    def job(name: str, chunks: int) -> dict[str, object]:
        simulate = {"chunks": chunks, "chunkDelaySeconds": 0.1}
        return job_manifest(name, engine={"name": "simulated", "simulate": simulate})

    def phase(name: str) -> Phase | None:
        found = store.get_job(NS, name)
        assert found is not None
        return found.status.phase

    store.create_job(NS, job("short", 4))  # about 0.4 s
    store.create_job(NS, job("long", 30))  # about 3 s
    t = threading.Thread(target=worker.run)
    t.start()
    try:
        wait_for(lambda: phase("short") == phase("long") == Phase.LEASED, timeout=10)
        ask(store, "r1")
        registration.renew_once()
        seen = record(store)
        assert (seen.state, seen.answered, seen.refused) == (BUSY, BUSY, True)
        assert liveness.ready() and not worker.drain.draining()

        wait_for(lambda: phase("short") == Phase.SUCCEEDED, timeout=10)
        registration.renew_once()  # one slot free, the other holds the long job's lease
        seen = record(store)
        assert phase("long") == Phase.LEASED, "the long job ended too soon for this test"
        assert (seen.state, seen.refused, seen.drained) == (BUSY, True, False)
        assert liveness.ready() and not worker.drain.draining()

        wait_for(lambda: phase("long") == Phase.SUCCEEDED, timeout=10)

        def answered_drained() -> bool:
            registration.renew_once()
            return record(store).drained

        wait_for(answered_drained, timeout=5)
        assert record(store).state == DRAINING
        assert not liveness.ready(), "/readyz answers 503 once every slot is free and drained"
        store.create_job(NS, job("later", 1))
        time.sleep(1.0)  # twenty self-serve intervals: neither slot claims it
        later = store.get_job(NS, "later")
        assert later is not None and later.status.phase == Phase.QUEUED
        assert later.status.attempts == 0

        ask(store, None)
        registration.renew_once()
        assert liveness.ready()
        wait_for(lambda: phase("later") == Phase.SUCCEEDED, timeout=10)
    finally:
        worker.stop()
        t.join(10)
        store.close()
    assert not t.is_alive()
    assert worker.claims == 3
