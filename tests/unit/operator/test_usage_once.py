"""Usage counts each job's published audio once on the memory store: across operator restarts,
a killed leader's unwritten count, a write whose answer was lost, and two leaders' writes."""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Callable

from recall.cli.notify import usage
from recall.kube import ConfigMapData, Unavailable
from recall.operator.reconcile.cache import JobCache
from recall.operator.usage import CONFIG_MAP, KEEP_DAYS, MARKS, Usage
from recall.resources import Published
from recall_dev.twin.api import Fault, MemoryApi
from recall_dev.twin.clock import FakeClock
from tests.unit.fakes import NS, claim, job_manifest, result_of


def published_job(store: MemoryApi, clock: FakeClock, name: str, seconds: float) -> None:
    store.create_job(NS, job_manifest(name))
    h = claim(store, clock, name)
    h.complete(result_of(h).model_copy(update={"duration_seconds": seconds, "channels": 1}))
    store.patch_job_status(NS, name, None, {"published": Published(time=clock.now()).to_api()})


def operator(store: MemoryApi, clock: FakeClock) -> Usage:
    """A freshly started operator's usage: leading before its cache's first list (the chart's
    default, leader election off), then the list."""
    cache = JobCache(clock)
    leading = threading.Event()
    leading.set()
    u = Usage(store, cache, leading=leading, clock=clock)
    cache.relisted(iter(store.list_jobs(NS).items))
    return u


def audio(store: MemoryApi) -> tuple[int, float]:
    [row] = usage(store, [NS], None, None)
    return row.jobs, row.audio_seconds


def test_usage__a_restarted_operator_counts_no_job_again() -> None:
    store, clock = MemoryApi(), FakeClock()
    cache = JobCache(clock)
    leading = threading.Event()
    leading.set()
    u = Usage(store, cache, leading=leading, clock=clock)
    store.create_job(NS, job_manifest("j"))
    cache.relisted(iter(store.list_jobs(NS).items))
    h = claim(store, clock, "j")
    h.complete(result_of(h).model_copy(update={"duration_seconds": 60.0, "channels": 1}))
    store.patch_job_status(NS, "j", None, {"published": Published(time=clock.now()).to_api()})
    cache.relisted(iter(store.list_jobs(NS).items))  # seen being published
    u.flush()
    assert audio(store) == (1, 60.0)
    for _ in range(3):  # three restarts, each flushing what it found
        operator(store, clock).flush()
        assert audio(store) == (1, 60.0)


def test_usage__a_count_a_killed_leader_had_not_written_is_written_once_by_the_next() -> None:
    store, clock = MemoryApi(), FakeClock()
    published_job(store, clock, "a", 60.0)
    operator(store, clock).flush()
    published_job(store, clock, "b", 30.0)
    operator(store, clock)  # counts b, killed before its flush
    operator(store, clock).flush()
    operator(store, clock).flush()
    assert audio(store) == (2, 90.0)


def test_usage__a_write_whose_answer_was_lost_is_not_added_again() -> None:
    store, clock = MemoryApi(), FakeClock()
    published_job(store, clock, "a", 60.0)
    operator(store, clock).flush()  # the ConfigMap exists: the next write is an update
    published_job(store, clock, "b", 30.0)
    u = operator(store, clock)
    store.inject(Fault("patch_config_map", Unavailable("timeout"), applied=True))
    assert u.flush() == 0
    assert audio(store) == (2, 90.0)  # applied, its answer lost
    u.flush()
    u.flush()
    assert audio(store) == (2, 90.0)


class Racing(MemoryApi):
    """Runs `between` once, right after the next read of the usage ConfigMap."""

    between: Callable[[], object] | None = None

    def get_config_map(self, namespace: str, name: str) -> ConfigMapData | None:
        cm = super().get_config_map(namespace, name)
        if name == CONFIG_MAP and self.between is not None:
            between, self.between = self.between, None
            between()
        return cm


def test_usage__two_leaders_writing_at_once_lose_nothing_and_count_nothing_twice() -> None:
    store, clock = Racing(), FakeClock()
    published_job(store, clock, "a", 60.0)
    operator(store, clock).flush()
    published_job(store, clock, "b", 30.0)
    published_job(store, clock, "c", 10.0)
    first, second = operator(store, clock), operator(store, clock)  # both see b and c
    store.between = second.flush  # the second writes between the first's read and write
    first.flush()
    assert audio(store) == (3, 100.0)
    cm = store.get_config_map(NS, CONFIG_MAP)
    assert cm is not None and len(cm.data[MARKS + clock.now().date().isoformat()].split()) == 3


def test_usage__marks_of_days_past_the_kept_ones_are_dropped() -> None:
    store, clock = MemoryApi(), FakeClock()
    published_job(store, clock, "a", 60.0)
    first_day = clock.now().date().isoformat()
    operator(store, clock).flush()
    clock.step(KEEP_DAYS * 86_400)
    published_job(store, clock, "b", 30.0)
    operator(store, clock).flush()  # a: its day's marks no longer kept, and not counted again
    cm = store.get_config_map(NS, CONFIG_MAP)
    assert cm is not None and MARKS + first_day not in cm.data
    assert json.loads(cm.data[first_day])["audioSeconds"] == 60.0
    assert audio(store) == (2, 90.0)
    assert usage(store, [NS], dt.date.fromisoformat(first_day), None)[0].jobs == 2
