"""Helpers for unit tests on the memory store: a hand-driven clock, manifests, a synced
controller. No API server."""

from __future__ import annotations

import datetime as dt
from typing import Any

from recall.base.settings import OperatorSettings
from recall.kube.memory import MemoryStore
from recall.operator.controller import Controller
from recall.protocol.workers import SELECTOR
from recall.resources import API_VERSION
from recall.worker.holder import LeaseHolder

NS = "default"
T0 = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


class Clock:
    """A monotonic clock the test moves by hand; `wall()` follows it from T0."""

    def __init__(self, start: float = 1000.0) -> None:
        self.t = start
        self.start = start

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds

    def wall(self) -> dt.datetime:
        return T0 + dt.timedelta(seconds=self.t - self.start)


def job_manifest(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "TranscriptionJob",
        "metadata": {"name": name, "labels": {}},
        "spec": {
            "source": {"url": f"file:///media/{name}.wav"},
            "leaseDurationSeconds": 10,
            "engine": {"name": "simulated", "simulate": {"chunks": 2, "chunkDelaySeconds": 0}},
            **spec,
        },
    }


def batch_manifest(name: str, keys: list[str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "Batch",
        "metadata": {"name": name, "generation": 1},
        "spec": {
            "items": [{"key": k, "source": {"url": f"file:///media/{k}.wav"}} for k in keys],
            "defaults": {
                "leaseDurationSeconds": 10,
                "maxAttempts": 3,
                "engine": {"name": "simulated"},
            },
            **spec,
        },
    }


class Operator:
    """A controller over a memory store, its cache synced by hand before every tick."""

    def __init__(self, store: MemoryStore, clock: Clock, **settings: Any) -> None:
        self.store = store
        self.clock = clock
        self.controller = Controller(
            store,
            OperatorSettings(namespace=NS, **settings),
            clock=clock,
            now=clock.wall,
        )
        self.controller.leading.set()
        self.batches_follow = True  # False: the controller's Batch copies lag (kopf's watch)

    def sync(self) -> None:
        self.controller.cache.relisted(iter(self.store.list_jobs(NS).items))
        self.controller.registry.relisted(iter(self.store.list_leases(NS, SELECTOR).items))
        if self.batches_follow or not self.controller._batches:
            for batch in self.store.list_batches(NS):
                self.controller.put_batch(batch)

    def tick(self) -> list[Any]:
        self.sync()
        reports = self.controller.run_once()
        self.sync()
        return reports


def claim(store: MemoryStore, clock: Clock, name: str, worker: str = "w1") -> LeaseHolder:
    """`worker` claims job `name` on the test's clock."""
    job = store.get_job(NS, name)
    assert job is not None
    h = LeaseHolder.claim(
        store, job, worker, renew_deadline_fraction=0.6, clock=clock, now=clock.wall
    )
    assert isinstance(h, LeaseHolder)
    return h
