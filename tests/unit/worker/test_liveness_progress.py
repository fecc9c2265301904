"""The worker's liveness while it works (`recall.worker.health`, `recall.worker.attempt`): the
real loop on the memory store beats at each chunk, so a job longer than `stale_after` never
makes /healthz answer 503, in one slot or with every slot busy; an engine call that hangs
still does."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from recall.base.settings import WorkerSettings
from recall.engines.base import TranscribeRequest
from recall.engines.simulated import SimulatedEngine
from recall.media.types import Segment
from recall.resources import Phase
from recall.worker.health import Liveness
from recall.worker.loop import Worker
from recall_dev.twin.api import MemoryApi
from tests.helpers import wait_for
from tests.unit.fakes import NS, job_manifest, memory_bucket

STALE = 1.5  # seconds; each long job below takes about 2.5 s


class Watched(Liveness):
    """A liveness that records, at each beat, how old the previous one was: the largest is how
    long /healthz would have gone without one."""

    def __init__(self, stale_after: float) -> None:
        super().__init__(stale_after)
        self.gaps: list[float] = []

    def beat(self) -> None:
        self.gaps.append(self.age())
        super().beat()


def worker_of(store: MemoryApi, liveness: Liveness, engine: SimulatedEngine, **kw: Any) -> Worker:
    settings = WorkerSettings(id="w1", engine="simulated", self_serve_seconds=0.05, **kw)
    return Worker(
        store, settings, engine, namespace=NS, results=memory_bucket(), beat=liveness.beat
    )


def long_job(name: str, chunks: int = 25, delay: float = 0.1) -> dict[str, Any]:
    simulate = {"chunks": chunks, "chunkDelaySeconds": delay}
    return job_manifest(name, engine={"name": "simulated", "simulate": simulate})


@pytest.mark.parametrize("slots", [1, 2])
def test_worker__a_job_longer_than_stale_after_keeps_it_alive(slots: int) -> None:
    """Every slot busy for about 2.5 s with a 1.5-s liveness, then one more job (the loop's turn
    after the first ones records their silence): the work beats at each chunk, so no silence
    ever reaches `stale_after`."""
    store = MemoryApi(watch_seconds=1.0)
    names = [f"long{i}" for i in range(slots + 1)]
    for name in names:
        store.create_job(NS, long_job(name))
    liveness = Watched(STALE)
    worker = worker_of(store, liveness, SimulatedEngine(), slots=slots, max_jobs=len(names))
    t = threading.Thread(target=worker.run)
    t.start()
    t.join(30)
    assert not t.is_alive(), "the worker did not finish"
    for name in names:
        job = store.get_job(NS, name)
        assert job is not None and job.status.phase == Phase.SUCCEEDED, store.dump()
    assert worker.claims == len(names)
    assert max(liveness.gaps) < STALE, f"/healthz went {max(liveness.gaps):.1f} s without a beat"
    store.close()


class HangingEngine(SimulatedEngine):
    """Its third chunk's call never returns until `gate` is set (a hung engine)."""

    def __init__(self) -> None:
        super().__init__(chunk_delay_seconds=0.05)
        self.hung = threading.Event()
        self.gate = threading.Event()

    def transcribe(self, request: TranscribeRequest) -> list[Segment]:
        if request.chunk.index == 2:
            self.hung.set()
            self.gate.wait(30)
        return super().transcribe(request)


def test_worker__an_engine_call_that_hangs_makes_it_stale() -> None:
    """The chunks before it beat; then nothing does, and /healthz answers 503."""
    store = MemoryApi(watch_seconds=1.0)
    store.create_job(NS, long_job("hung", chunks=5, delay=0.05))
    liveness = Liveness(stale_after=0.5)
    engine = HangingEngine()
    worker = worker_of(store, liveness, engine, grace_seconds=0.1, max_jobs=1)
    t = threading.Thread(target=worker.run)
    t.start()
    try:
        assert engine.hung.wait(10)
        wait_for(lambda: not liveness.healthy(), timeout=10, message="a stale liveness")
        assert liveness.age() >= 0.5
    finally:
        worker.stop()
        engine.gate.set()
        t.join(30)
    assert not t.is_alive()
    store.close()
