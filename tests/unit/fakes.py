"""Helpers for unit tests on the memory store: manifests, a synced
controller, the simulated engine's record of its calls and a worker that runs one job. No API
server."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recall.base.settings import OperatorSettings, StoreSettings, WorkerSettings
from recall.bucket import Bucket, Stores
from recall.engines.simulated import SimulatedEngine
from recall.operator.reconcile.record import JobRecord
from recall.operator.runtime.wiring import wire
from recall.protocol.workers import SELECTOR
from recall.resources import API_VERSION, Batch, Part, Phase, Result
from recall.worker.holder import LeaseHolder
from recall.worker.loop import Worker
from recall_dev.twin.api import MemoryApi
from recall_dev.twin.clock import EPOCH, FakeClock

NS = "default"
T0 = EPOCH  # the FakeClock's wall time at its start


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


def item_record(batch: Batch, index: int, status: dict[str, Any]) -> JobRecord:
    """The operator's record of item `index` of `batch` (its job `<batch>-<index>`) in
    `status`."""
    return JobRecord.from_raw(
        {
            "metadata": {
                "name": f"{batch.name}-{index}",
                "namespace": batch.namespace,
                "labels": {"recall.dev/index": str(index)},
            },
            "spec": {"batchRef": batch.name, "item": str(index), "source": {"url": "file:///a"}},
            "status": status,
        }
    )


class Operator:
    """A controller over a memory store, its cache synced by hand before every tick."""

    def __init__(
        self, store: MemoryApi, clock: FakeClock, results: Bucket | None = None, **settings: Any
    ) -> None:
        self.store = store
        self.clock = clock
        self.results = results or memory_bucket()
        self.controller = wire(
            store,
            OperatorSettings(namespace=NS, **settings),
            results=self.results,
            clock=clock,
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
        self.controller.results.run_once()  # publish and collect, as its own thread does
        self.sync()
        return reports


@dataclass(frozen=True)
class EngineCall:
    """What one transcribe call was given, as the simulated engine records it (`record_path`)."""

    attempt: int
    chunk: int
    language: str | None
    context: str


def engine_calls(record: Path) -> list[EngineCall]:
    """The calls a `SimulatedEngine(record_path=record)` made, in order."""
    lines = record.read_text().splitlines() if record.exists() else []
    return [
        EngineCall(r["attempt"], r["chunk"], r["language"], r["context"])
        for r in map(json.loads, lines)
    ]


def run_one_job(store: MemoryApi, engine: SimulatedEngine, results: Bucket) -> None:
    """A worker of the real loop that does one job on `store` and exits."""
    settings = WorkerSettings(
        id="w1", engine="simulated", idle_exit_seconds=1.0, self_serve_seconds=0.2, max_jobs=1
    )
    worker = Worker(store, settings, engine, namespace=NS, results=results)
    t = threading.Thread(target=worker.run)
    t.start()
    t.join(30)
    assert not t.is_alive(), "the worker did not finish"


def memory_bucket(name: str = "results") -> Bucket:
    """A results store in memory (obstore's MemoryStore), fresh for each call."""
    return Stores(StoreSettings(url=f"memory://{name}")).results()


def claim(store: MemoryApi, clock: FakeClock, name: str, worker: str = "w1") -> LeaseHolder:
    """`worker` claims job `name` on the test's clock."""
    job = store.get_job(NS, name)
    assert job is not None
    h = LeaseHolder.claim(store, job, worker, renew_deadline_fraction=0.6, clock=clock)
    assert isinstance(h, LeaseHolder)
    return h


def assert_one_given_back(store: MemoryApi, names: str) -> None:
    """Every job of `names` (one letter each) Succeeded, and one of them was released once by
    a worker's fault before: its attempt given back, no error recorded."""
    jobs = {n: store.get_job(NS, n) for n in names}
    assert all(j and j.status.phase == Phase.SUCCEEDED for j in jobs.values()), store.dump()
    given_back = [j for j in jobs.values() if j and j.status.releases]
    assert len(given_back) == 1
    status = given_back[0].status
    assert (status.releases, status.attempts, status.last_error) == (1, 2, None)


def result_of(h: LeaseHolder) -> Result:
    """A result naming the transcript `h`'s attempt would have written."""
    from recall.transcripts import directory_of, transcript_key

    return Result(transcript=transcript_key(directory_of(h.known, h.attempt, h.token)))


PARTS = [Part(attempt=1, token="f" * 32, first=0, end=1)]  # a checkpoint for renewals


@dataclass
class BucketFault:
    op: str  # put, get, list, delete, copy
    error: Exception
    when: Callable[[str], bool] = lambda _key: True
    times: int = 1
    applied: bool = False  # the call is done, then the error raised (a lost answer)


class FaultyBucket(Bucket):
    """A results store in memory whose calls fail as injected; every call is recorded."""

    def __init__(self) -> None:
        inner = memory_bucket()
        super().__init__(inner.stores, inner.client, inner.location)
        self.faults: list[BucketFault] = []
        self.calls: list[tuple[str, str]] = []

    def inject(self, fault: BucketFault) -> None:
        self.faults.append(fault)

    def _fault(self, op: str, key: str) -> BucketFault | None:
        self.calls.append((op, key))
        for f in self.faults:
            if f.op == op and f.times > 0 and f.when(key):
                f.times -= 1
                return f
        return None

    def put(self, key: str, data: bytes, *, once: bool = True) -> None:
        fault = self._fault("put", key)
        if fault is not None and not fault.applied:
            raise fault.error
        super().put(key, data, once=once)
        if fault is not None:
            raise fault.error

    def get(self, key: str) -> bytes | None:
        fault = self._fault("get", key)
        if fault is not None:
            raise fault.error
        return super().get(key)


class Leader:
    """A leadership that a test takes away (`leading = False`)."""

    term: int | None = None

    def __init__(self) -> None:
        self.leading = True

    def holds(self) -> bool:
        return self.leading

    def need_term(self, at_least: int) -> None:
        del at_least
