"""The fence before the engine: no engine call starts on a lease the worker cannot show to be
fresh. The real worker loop on the memory store, whose API stops answering mid-job."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from recall.base.clock import SYSTEM
from recall.base.settings import WorkerSettings
from recall.engines.base import TranscribeRequest
from recall.engines.simulated import SimulatedEngine
from recall.kube import Unavailable
from recall.media.types import Segment
from recall.resources import Phase, TranscriptionJob
from recall.worker.cadence import FRESH_HEARTBEATS
from recall.worker.loop import Worker
from recall_dev.twin.api import MemoryApi
from tests.unit.fakes import NS, job_manifest, memory_bucket

LEASE = 6.0  # a heartbeat every 2 s, fresh for 3 s, the renew deadline at 4 s
DELAY = 0.05  # the engine's time per chunk


class GoesSilent(MemoryApi):
    """Answers status writes until `silent` is set, then refuses them all as unreachable;
    records when each write that succeeded was sent."""

    def __init__(self) -> None:
        super().__init__(watch_seconds=1.0)
        self.silent = threading.Event()
        self.sent_ok: list[float] = []

    def patch_job_status(self, *args: Any, **kwargs: Any) -> TranscriptionJob:
        sent = SYSTEM.monotonic()
        if self.silent.is_set():
            raise Unavailable("the API server does not answer")
        job = super().patch_job_status(*args, **kwargs)
        self.sent_ok.append(sent)
        return job

    def replace_job_status(self, *args: Any, **kwargs: Any) -> TranscriptionJob:  # the claim
        sent = SYSTEM.monotonic()
        job = super().replace_job_status(*args, **kwargs)
        self.sent_ok.append(sent)
        return job


class Timed(SimulatedEngine):
    """The simulated engine, noting when each call starts."""

    def __init__(self) -> None:
        super().__init__(chunks=2, chunk_delay_seconds=0)
        self.starts: list[float] = []

    def transcribe(self, request: TranscribeRequest) -> list[Segment]:
        self.starts.append(SYSTEM.monotonic())
        return super().transcribe(request)


def test_engine__no_call_starts_on_a_lease_not_shown_fresh(tmp_path: Path) -> None:
    store, engine = GoesSilent(), Timed()
    store.create_job(
        NS,
        job_manifest(
            "long",
            leaseDurationSeconds=int(LEASE),
            checkpointSeconds=1,
            engine={"name": "simulated", "simulate": {"chunks": 400, "chunkDelaySeconds": DELAY}},
        ),
    )
    settings = WorkerSettings(
        id="w1", engine="simulated", idle_exit_seconds=1.0, self_serve_seconds=0.2
    )
    worker = Worker(store, settings, engine, namespace=NS, results=memory_bucket())
    t = threading.Thread(target=worker.run)
    t.start()
    while len(engine.starts) < 30 and t.is_alive():  # 1.5 s into the job: it renewed already
        t.join(0.01)
    store.silent.set()
    silent_at = SYSTEM.monotonic()
    t.join(30)
    assert not t.is_alive(), "the worker did not stop"

    fresh = FRESH_HEARTBEATS * LEASE / 3
    last_ok = max(s for s in store.sent_ok if s < silent_at)
    after = [s for s in engine.starts if s > silent_at]
    # The engine went on while the lease was still fresh (the heartbeater's writes no longer
    # landing), and started nothing once it could not show a write within `fresh`, although
    # the renew deadline (two heartbeats) had not passed yet.
    assert after, "the engine should go on while the lease is fresh"
    assert max(after) <= last_ok + fresh + 0.01, (max(after) - last_ok, fresh)
    assert max(engine.starts) < last_ok + LEASE * 2 / 3
    job = store.get_job(NS, "long")
    assert job is not None and job.status.phase == Phase.LEASED  # nothing more was written
    store.close()
