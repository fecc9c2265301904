"""The worker's side of a drain (`recall.worker.drain`) with its registration Lease on the memory
store: answered drained only between jobs, answered busy while a job is held, cancelled by
removing the request; a drained worker picks nothing and is not ready."""

from __future__ import annotations

import threading

from recall.base.settings import WorkerSettings
from recall.engines.simulated import SimulatedEngine
from recall.kube.memory import MemoryStore
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
from tests.unit.fakes import NS, job_manifest, memory_bucket


def registered(store: MemoryStore, drain: Drain, worker: str = "w1") -> Registration:
    registration = Registration(store, NS, worker, "simulated", drain=drain)
    registration.renew_once()
    return registration


def ask(store: MemoryStore, request: str | None, worker: str = "w1") -> None:
    """What the operator writes: the request on the Lease, at the version it read."""
    lease = store.get_lease(NS, lease_name(worker))
    assert lease is not None
    store.replace_lease(NS, lease_name(worker), with_drain(lease, request))


def record(store: MemoryStore, worker: str = "w1") -> Registered:
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
    store = MemoryStore()
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
    store = MemoryStore()
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
    store = MemoryStore()
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
