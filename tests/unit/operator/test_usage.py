"""Usage per namespace on the memory store: engine seconds of every attempt (an abandoned one
too), audio seconds per channel when published, the ConfigMap record `recall usage` reads; and
`recall notify resend` marking a given-up event to be sent again."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from prometheus_client import REGISTRY

from recall.cli.notify import resend, usage
from recall.operator.reconcile.cache import JobCache
from recall.operator.usage import Usage
from recall.resources import Phase, Published
from recall.worker.holder import LeaseHolder
from recall_dev.twin.api import MemoryApi
from recall_dev.twin.clock import FakeClock
from tests.unit.fakes import NS, Operator, claim, job_manifest, result_of


def setup() -> tuple[MemoryApi, FakeClock, JobCache, Usage]:
    store, clock = MemoryApi(), FakeClock()
    cache = JobCache(clock)
    leading = threading.Event()
    leading.set()
    return store, clock, cache, Usage(store, cache, leading=leading, clock=clock)


def sync(store: MemoryApi, cache: JobCache) -> None:
    for raw in store.list_jobs(NS).items:
        cache.changed("MODIFIED", raw)


def held(store: MemoryApi, clock: FakeClock, cache: JobCache, *, renewals: int) -> LeaseHolder:
    """Job `j` claimed, then renewed `renewals` times 5 s apart; the cache synced after each
    write."""
    h = claim(store, clock, "j")
    sync(store, cache)
    for _ in range(renewals):
        clock.step(5)
        h.renew()
        sync(store, cache)
    return h


def counter(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_usage__every_attempt_and_each_channel_counted_and_kept_in_a_config_map() -> None:
    store, clock, cache, u = setup()
    store.create_job(NS, job_manifest("j", pool="gpu", transcript={"channels": "split"}))
    sync(store, cache)
    before = counter(
        "recall_engine_seconds_total", job_namespace=NS, pool="gpu", engine="simulated"
    )
    # A first attempt is abandoned (its lease released after 20 s), the second completes.
    h = held(store, clock, cache, renewals=4)
    h.release()
    sync(store, cache)
    h = held(store, clock, cache, renewals=6)
    h.complete(result_of(h).model_copy(update={"duration_seconds": 60.0, "channels": 2}))
    sync(store, cache)
    store.patch_job_status(NS, "j", None, {"published": Published(time=clock.now()).to_api()})
    sync(store, cache)
    spent = counter("recall_engine_seconds_total", job_namespace=NS, pool="gpu", engine="simulated")
    assert spent - before == 50.0
    assert u.flush() == 1
    day = clock.now().date()
    [row] = usage(store, [NS], day, day)
    assert (row.jobs, row.audio_seconds, row.engine_seconds) == (1, 120.0, 50.0)
    assert usage(store, [NS], day + dt.timedelta(days=1), None)[0].jobs == 0
    u.flush()  # nothing new: the record stays
    assert usage(store, [NS], None, None)[0].audio_seconds == 120.0


@pytest.mark.parametrize("max_attempts", [1, 2])
def test_usage__a_reclaimed_attempt_counts_to_its_last_renewal_when_it_fails_the_job_too(
    max_attempts: int,
) -> None:
    """A dead worker's attempt costs what it held the job for (claim to last renewal), whether
    the reclaim queues the job again or fails it (its attempts spent): not the whole lease."""
    store, clock = MemoryApi(), FakeClock()
    op = Operator(store, clock)
    leading = threading.Event()
    leading.set()
    u = Usage(store, op.controller.cache, leading=leading, clock=clock)
    store.create_job(NS, job_manifest("j", leaseDurationSeconds=120, maxAttempts=max_attempts))
    op.tick()
    h = claim(store, clock, "j")
    for _ in range(4):  # renewed for 20 s, then the worker dies
        clock.step(5)
        h.renew()
        op.tick()
    for _ in range(30):
        clock.step(10)
        op.tick()
        job = store.get_job(NS, "j")
        if job is not None and job.status.expired_leases:
            break
    assert job is not None
    assert job.status.phase is (Phase.FAILED if max_attempts == 1 else Phase.QUEUED)
    assert u.flush() == 1
    [row] = usage(store, [NS], None, None)
    assert row.engine_seconds == 20.0


def test_resend__a_given_up_event_is_owed_again_with_its_id() -> None:
    store, clock, _, _ = setup()
    store.create_job(NS, job_manifest("j"))
    h = claim(store, clock, "j")
    h.complete(result_of(h))
    store.patch_job_status(NS, "j", None, {"published": Published(time=clock.now()).to_api()})
    record = {"id": "e1", "attempts": 5, "givenUp": ["https://x/"], "time": "2026-12-01T00:00:00Z"}
    store.patch_job_status(NS, "j", None, {"notified": record})
    assert resend(store, NS, "job/j") == ["job/j"]
    job = store.get_job(NS, "j")
    assert job is not None and job.status.notified is not None
    assert (job.status.notified.id, job.status.notified.time, job.status.notified.given_up) == (
        "e1",
        None,
        [],
    )
    assert resend(store, NS, "job/j") == []  # nothing given up any more
