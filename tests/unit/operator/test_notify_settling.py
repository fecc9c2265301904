"""Events out on the memory store: an event no sink wants is settled at once (a Batch whose sinks
filter its items' types settles, and its TTL runs), a job whose own sinks want none of its type
is read once, and a standby keeps nothing (its queue, the deletions it timed)."""

from __future__ import annotations

from recall.kube.verbs import BATCHES
from recall.resources import Published, is_true
from recall_dev.twin.api import MemoryApi
from recall_dev.twin.clock import FakeClock
from tests.unit.fakes import NS, claim, job_manifest, result_of
from tests.unit.operator.test_notify import (
    KEY,
    SINK,
    FakeSender,
    delivering,
    failed_items,
    finished_job,
    known,
    notifier,
    one_succeeded_one_failed,
    sync,
)

ITEM_SUCCEEDED = "dev.recall.batch.item.succeeded"
BATCH_COMPLETED = "dev.recall.batch.completed"


def test_notifier__items_whose_type_no_sink_wants_do_not_hold_the_batch_or_its_ttl() -> None:
    store, clock = MemoryApi(), FakeClock()
    store.put_secret(NS, "s", {"hmac": KEY})
    sink = {**SINK, "types": [ITEM_SUCCEEDED, BATCH_COMPLETED]}
    op = one_succeeded_one_failed(store, clock, sink)
    n, sender = delivering(store, clock, op)
    assert sorted(body["type"] for _, body, _ in sender.sent) == [BATCH_COMPLETED, ITEM_SUCCEEDED]
    batch = store.get_batch(NS, "b")
    assert batch is not None and batch.status.notified is not None
    assert batch.status.notified.time is not None  # settled: its failed item owed nothing
    items = batch.status.notified.items
    assert items is not None and (items.delivered, items.given_up, items.pending) == (1, 0, 0)
    assert is_true(batch.status.conditions, "Notified")
    assert not n.deletion_pending(batch)
    op.tick()  # the TTL runs
    assert store.get_job(NS, "b-a") is None and store.get_job(NS, "b-c") is None


def test_deletion__items_no_sink_wants_do_not_hold_it() -> None:
    store, clock = MemoryApi(), FakeClock()
    store.put_secret(NS, "s", {"hmac": KEY})
    sink = {**SINK, "types": [ITEM_SUCCEEDED, BATCH_COMPLETED]}
    failed_items(store, clock, "b", 3, notify=[sink])
    n = notifier(store, clock, FakeSender(), batches=known(store, "b"), delete_seconds=300)
    for _ in range(3):
        n.run_once()
    batch = store.get_batch(NS, "b")
    assert batch is not None and batch.status.notified is not None
    assert batch.status.notified.time is not None
    assert not n.deletion_pending(batch)  # at once, not after delete_seconds


def test_notifier__a_job_whose_own_sinks_want_another_type_is_read_once() -> None:
    store, clock = MemoryApi(), FakeClock()
    store.put_secret(NS, "s", {"hmac": KEY})
    only_failed = {**SINK, "types": ["dev.recall.job.failed"]}
    store.create_job(NS, job_manifest("j", notify=[only_failed]))
    h = claim(store, clock, "j")
    h.complete(result_of(h))
    finished_job(store, clock, "wanted")
    store.patch_job_status(NS, "j", None, {"published": Published(time=clock.now()).to_api()})
    sender = FakeSender()
    n = notifier(store, clock, sender)
    before = len(store.calls)
    for _ in range(3):  # a term, a relist, a leader change, another term
        n.run_once()
        sync(n, store)
        n.run_once()
        n.leading.clear()
        n.run_once()
        n.leading.set()
    read = [name for op, name in store.calls[before:] if op == "get_job"]
    assert read.count("j") == 1
    assert [body["subject"] for _, body, _ in sender.sent] == ["wanted"]


def test_notifier__a_standby_queues_nothing() -> None:
    store, clock = MemoryApi(), FakeClock()
    store.put_secret(NS, "s", {"hmac": KEY})
    n = notifier(store, clock, FakeSender())
    n.leading.clear()
    for i in range(20):
        finished_job(store, clock, f"j{i}")
        sync(n, store)
    n.run_once()
    assert n.pending() == 0
    n.leading.set()
    for _ in range(20):  # the term's first pass finds what is owed in the cache
        n.run_once()
        if not n.pending():
            break
    jobs = [store.get_job(NS, f"j{i}") for i in range(20)]
    assert all(j is not None and j.status.notified and j.status.notified.time for j in jobs)
    assert n.pending() == 0


def test_deletion__a_new_term_times_a_deletion_afresh() -> None:
    store, clock = MemoryApi(), FakeClock()
    store.put_secret(NS, "s", {"hmac": KEY})
    failed_items(store, clock, "b", 2, notify=[SINK])
    n = notifier(store, clock, FakeSender(), batches=known(store, "b"), delete_seconds=300)
    batch = store.get_batch(NS, "b")
    assert batch is not None
    assert n.deletion_pending(batch)  # not loaded yet
    clock.step(200)
    n.leading.clear()  # another replica leads a while
    n.run_once()
    n.leading.set()
    clock.step(150)
    assert n.deletion_pending(batch)  # this term's bound runs from its own first call


def test_notifier__a_batch_whose_sinks_change_has_its_jobs_read_again() -> None:
    """A failed item read once and found to owe nothing (its Batch's sink wants successes)
    is read again once the Batch's sinks change, and its event goes out."""
    store, clock = MemoryApi(), FakeClock()
    store.put_secret(NS, "s", {"hmac": KEY})
    failed_items(store, clock, "b", 1, notify=[{**SINK, "types": [ITEM_SUCCEEDED]}])
    sender = FakeSender()
    n = notifier(store, clock, sender, batches=known(store, "b"))
    for _ in range(2):
        n.run_once()
        sync(n, store)
    assert [body["type"] for _, body, _ in sender.sent] == []
    batch = store.get_batch(NS, "b")
    assert batch is not None
    spec = batch.spec.to_api()
    spec["notify"] = [{**SINK, "types": [ITEM_SUCCEEDED, "dev.recall.batch.item.failed"]}]
    store.verbs.patch(BATCHES, NS, "b", {"spec": spec})
    for _ in range(3):  # a relist, then a new term
        sync(n, store)
        n.run_once()
        n.leading.clear()
        n.run_once()
        n.leading.set()
    assert [body["type"] for _, body, _ in sender.sent] == ["dev.recall.batch.item.failed"]
