"""Dispatch over time: the ready queue stays as big as the queue across relists, a job whose
offer or reject write failed is offered again at the next pass, and a worker that never claims
rests instead of holding the most urgent job in offers it lets expire."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from recall.kube.base import Unavailable
from recall.operator.dispatch import ReadyQueue
from recall.protocol.workers import FAILED, LOADED, EngineState
from recall.resources import Phase
from recall.worker.registration import Registration
from recall_dev.twin.api import MemoryApi
from recall_dev.twin.clock import FakeClock
from recall_dev.twin.verbs import Fault
from tests.unit.fakes import NS, Operator, claim, job_manifest, result_of
from tests.unit.operator.test_dispatch import offers, record, register


def heap_entries(q: ReadyQueue) -> int:
    return sum(len(h) for groups in q._heaps.values() for g in groups.values() for h in g.values())


def test_ready_queue__relists_of_unchanged_jobs_do_not_grow_it() -> None:
    q = ReadyQueue(FakeClock(start=0.0))
    jobs = [record(f"j{i}", batch="b", index=i) for i in range(1000)]
    for r in jobs:
        q.update(None, r)
    for _ in range(6):  # every relist hands each job to the listener again, changed or not
        for r in jobs:
            q.update(r, r)
    assert heap_entries(q) == 1000
    picked = [q.pick(NS, "simulated") for _ in range(1001)]
    assert picked[-1] is None and len(set(picked[:-1])) == 1000, "each job once, none lost"


def test_ready_queue__a_job_deleted_while_offered_leaves_nothing_behind() -> None:
    q = ReadyQueue(FakeClock(start=0.0))
    offered = replace(record("j"), offer="w1")
    q.update(None, offered)
    assert (NS, "j") in q.offered_at
    q.update(offered, None)
    assert q.offered_at == {} and q.offered == {}


def fault_once(store: MemoryApi, op: str, **kw: Any) -> None:
    store.inject(Fault(op, Unavailable("503: the API server is restarting"), **kw))


def test_controller__a_failed_offer_write_is_tried_again_at_the_next_pass() -> None:
    store, clock = MemoryApi(), FakeClock()
    store.create_job(NS, job_manifest("a"))
    register(store, "w1")
    op = Operator(store, clock)
    op.sync()
    fault_once(store, "patch_job_status")  # no answer, and no watch event either
    assert op.controller.dispatch_once() == 0
    clock.step(1)
    assert op.controller.dispatch_once() == 1, "not lost until the next relist"
    op.sync()
    assert offers(store) == {"a": "w1"}


def test_controller__a_failed_reject_write_is_tried_again_at_the_next_pass() -> None:
    store, clock = MemoryApi(), FakeClock()
    store.create_job(NS, job_manifest("auto", language="auto", engine={"name": "whisper"}))
    tiny = "tiny.en@sha256:" + "ab" * 32
    Registration(
        store, NS, "w1", "whisper", engine_state=lambda: EngineState(LOADED, tiny, "", False)
    ).renew_once()
    op = Operator(store, clock)
    op.sync()
    fault_once(store, "get_job")  # the fenced write's first read
    op.controller.dispatch_once()
    assert store.get_job(NS, "auto").status.phase == Phase.QUEUED  # type: ignore[union-attr]
    op.controller.dispatch_once()
    assert store.get_job(NS, "auto").status.phase == Phase.FAILED  # type: ignore[union-attr]


def test_controller__a_worker_whose_engine_failed_is_offered_nothing() -> None:
    store, clock = MemoryApi(), FakeClock()
    store.create_job(NS, job_manifest("a"))
    failed = EngineState(FAILED, "", "ModelCacheUnwritable: read-only file system")
    register(store, "broken", engine_state=lambda: failed)
    op = Operator(store, clock)
    op.tick()
    assert offers(store) == {}
    register(store, "healthy")
    op.tick()
    assert offers(store) == {"a": "healthy"}


def test_controller__a_worker_that_never_claims_rests_the_urgent_job_goes_to_another() -> None:
    store, clock = MemoryApi(), FakeClock()
    for i in range(6):
        store.create_job(NS, job_manifest(f"j{i}"))
    store.create_job(NS, job_manifest("urgent", priority=10))
    # b-broken registers, is alive and idle, and claims nothing (its store probe failed)
    broken, healthy = register(store, "b-broken"), register(store, "h-healthy")
    op = Operator(store, clock, offer_seconds=5)
    held = None
    for _ in range(40):
        op.tick()
        if store.get_job(NS, "urgent").status.phase == Phase.LEASED:  # type: ignore[union-attr]
            break
        if held is not None and clock.monotonic() - held[1] >= 3:
            held[0].complete(result_of(held[0]))  # its jobs take three seconds
            held = None
            op.tick()
        mine = [name for name, w in offers(store).items() if w == "h-healthy"]
        if held is None and mine:
            held = (claim(store, clock, mine[0], "h-healthy"), clock.monotonic())
        clock.step(1)
        broken.renew_once()
        healthy.renew_once()
    urgent = store.get_job(NS, "urgent")
    assert urgent is not None and urgent.status.phase == Phase.LEASED, store.dump()
    assert urgent.status.lease is not None and urgent.status.lease.holder == "h-healthy"
