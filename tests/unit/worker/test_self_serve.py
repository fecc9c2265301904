"""A worker of the offers mode serves itself only after `self_serve_seconds` idle with no offer,
and then from the Queued jobs of its own pool, the most urgent first, in a bounded number of
reads."""

from __future__ import annotations

from typing import Any

from recall.kube import Selector
from recall.worker.queue import SELF_SERVE_PAGE, OfferQueue
from recall_dev.twin.api import MemoryApi
from recall_dev.twin.clock import FakeClock
from tests.unit.fakes import NS, job_manifest


def queue(store: MemoryApi, clock: FakeClock, worker: str = "w1", **kw: Any) -> OfferQueue:
    """`worker`'s offer queue, its view synced by hand (no informer thread)."""
    q = OfferQueue(store, NS, worker, "simulated", self_serve_seconds=10, clock=clock, **kw)
    sync(store, q, worker)
    return q


def sync(store: MemoryApi, q: OfferQueue, worker: str = "w1") -> None:
    mine = Selector(fields=f"status.offer.worker={worker}")
    q.relisted(iter(store.list_jobs(NS, mine).items))


def offer(store: MemoryApi, name: str, worker: str) -> None:
    store.patch_job_status(NS, name, None, {"offer": {"worker": worker}})


def lists(store: MemoryApi) -> int:
    return sum(1 for op, _ in store.calls if op.startswith("list_"))


def test_offers__after_a_long_job_the_next_offer_gets_its_time_before_a_self_serve() -> None:
    store, clock = MemoryApi(), FakeClock()
    for name in ("mine", "theirs"):
        store.create_job(NS, job_manifest(name))
    offer(store, "mine", "w1")
    offer(store, "theirs", "w2")
    q = queue(store, clock)
    picked = q.pick()
    assert picked is not None and picked.name == "mine"
    store.delete_job(NS, "mine")  # it ran for a minute and completed
    sync(store, q)
    clock.step(60)
    before = lists(store)
    assert q.pick() is None, "a self-serve before the operator saw the job complete"
    assert lists(store) == before
    clock.step(9)
    assert q.pick() is None
    clock.step(1)  # idle for self_serve_seconds with no offer: no operator, it seems
    served = q.pick()
    assert served is not None and served.name == "theirs"
    assert lists(store) == before + 1


def test_self_serve__a_pool_s_worker_finds_its_job_behind_other_pools_jobs() -> None:
    store, clock = MemoryApi(), FakeClock()
    for i in range(250):
        store.create_job(NS, job_manifest(f"a-{i:03}"))
    store.create_job(NS, job_manifest("z-gpu", pool="gpu"))
    gpu = queue(store, clock, "g1", pool="gpu")
    clock.step(10)
    chosen = gpu.pick()
    assert chosen is not None and chosen.name == "z-gpu"
    for i in range(250):
        store.delete_job(NS, f"a-{i:03}")
        store.create_job(NS, job_manifest(f"a-{i:03}", pool="gpu"))
    store.create_job(NS, job_manifest("z-cpu"))
    cpu = queue(store, clock, "c1")
    clock.step(10)
    chosen = cpu.pick()
    assert chosen is not None and chosen.name == "z-cpu", "a page of the gpu pool's hides none"


def test_self_serve__the_most_urgent_job_beyond_the_first_page() -> None:
    store, clock = MemoryApi(), FakeClock()
    for i in range(250):
        store.create_job(NS, job_manifest(f"a-{i:03}"))
    store.create_job(NS, job_manifest("z-urgent", priority=10))
    q = queue(store, clock)
    clock.step(10)
    chosen = q.pick()
    assert chosen is not None and chosen.name == "z-urgent"


def test_self_serve__reads_are_bounded() -> None:
    from recall.worker.queue import SELF_SERVE_PAGES

    store, clock = MemoryApi(), FakeClock()
    for i in range(SELF_SERVE_PAGE * SELF_SERVE_PAGES + 50):
        store.create_job(NS, job_manifest(f"a-{i:04}", pool="gpu"))
    q = queue(store, clock)  # the default pool: nothing for it
    clock.step(10)
    before = lists(store)
    assert q.pick() is None
    assert lists(store) - before == SELF_SERVE_PAGES
    assert q.pick() is None and lists(store) - before == SELF_SERVE_PAGES, "one try a period"
