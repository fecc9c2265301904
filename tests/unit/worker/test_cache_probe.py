"""A model cache the worker cannot write: the probe repeats what failed (a file made in the
cache is not enough: a full volume, or a lock file of another UID, let one be made), and a
cache the start-up load found broken makes the worker claim nothing, so no job is given back.
The real worker loop on the memory store with the simulated engine."""

from __future__ import annotations

import errno
import threading
import time
from pathlib import Path
from typing import Any

from recall.base.settings import WorkerSettings
from recall.engines.base import TranscribeRequest
from recall.engines.models import ModelCacheUnwritable
from recall.engines.simulated import SimulatedEngine
from recall.media.types import Segment
from recall.resources import Phase, TranscriptionJob
from recall.worker.loop import Worker
from recall_dev.twin.api import MemoryApi
from tests.unit.fakes import NS, job_manifest, memory_bucket


class FullCache(SimulatedEngine):
    """The simulated engine over a model cache whose volume is full until `freed`: fetching
    the model fails with ENOSPC, although an empty file can still be made there."""

    def __init__(self, directory: Path, *, preload: bool = False) -> None:
        super().__init__(chunks=2, chunk_delay_seconds=0)
        self.directory = directory
        self.freed = threading.Event()
        self.fetches = 0
        if preload:
            self.preload = self._preload  # the worker loads its own model at start-up

    def local_model(self, job: TranscriptionJob, cancel: threading.Event | None = None) -> str:
        del job, cancel
        self.fetches += 1
        if not self.freed.is_set():
            raise ModelCacheUnwritable(self.directory, OSError(errno.ENOSPC, "No space left"))
        return "model"

    def _preload(self) -> tuple[str, str]:
        self.local_model(None)  # type: ignore[arg-type]
        return "s3://models/x/", "sha256:0"

    def transcribe(self, request: TranscribeRequest) -> list[Segment]:
        self.local_model(request.job)
        return super().transcribe(request)


def settings(**kw: Any) -> WorkerSettings:
    return WorkerSettings(
        id="w1",
        engine="simulated",
        idle_exit_seconds=3.0,
        self_serve_seconds=0.2,
        store_probe_seconds=0.1,
        **kw,
    )


def attempts(store: MemoryApi) -> int:
    return sum(j.status.attempts for n in "ab" if (j := store.get_job(NS, n)))


def run_until_freed(store: MemoryApi, worker: Worker, engine: FullCache) -> int:
    """Run the worker; free the cache 1 s into it; the claims made before it was freed."""
    t = threading.Thread(target=worker.run)
    t.start()
    time.sleep(1.0)
    claimed = attempts(store)
    engine.freed.set()
    t.join(30)
    assert not t.is_alive()
    return claimed


def test_probe__repeats_the_fetch_that_failed_not_only_a_file_in_the_cache(tmp_path: Path) -> None:
    store = MemoryApi(watch_seconds=1.0)
    for n in "ab":
        store.create_job(NS, job_manifest(n))
    engine = FullCache(tmp_path / "models")
    worker = Worker(store, settings(), engine, namespace=NS, results=memory_bucket())
    claimed = run_until_freed(store, worker, engine)
    # One job given back; then, although a file could be made in the cache all along, no claim
    # until the fetch itself worked (the probes fetched meanwhile).
    assert claimed == 1, store.dump()
    assert engine.fetches >= 3
    jobs = [store.get_job(NS, n) for n in "ab"]
    assert all(j and j.status.phase == Phase.SUCCEEDED for j in jobs), store.dump()
    assert sum(j.status.releases for j in jobs if j) == 1
    store.close()


def test_preload__a_cache_found_broken_at_start_up_gives_no_job_back(tmp_path: Path) -> None:
    store = MemoryApi(watch_seconds=1.0)
    for n in "ab":
        store.create_job(NS, job_manifest(n))
    engine = FullCache(tmp_path / "models", preload=True)
    worker = Worker(store, settings(), engine, namespace=NS, results=memory_bucket())
    worker.preload.load_once()  # as the start-up thread does, before the first claim
    assert worker.cache.broken is not None
    claimed = run_until_freed(store, worker, engine)
    assert claimed == 0, store.dump()
    jobs = [store.get_job(NS, n) for n in "ab"]
    assert all(j and j.status.phase == Phase.SUCCEEDED for j in jobs), store.dump()
    assert sum(j.status.releases for j in jobs if j) == 0
    assert worker.engine_state().state == "loaded"  # the probe's load is what the Lease says
    store.close()
