"""A device that fails a model's load (`DeviceFailed`: the GPU out of memory) is the worker's
fault, not the job's: the real loop on the memory store releases the job (Queued, its attempt
given back, no lastError), says `failed` in its registration and claims nothing for a pause,
then does both jobs once the load works. faster-whisper's `WhisperModel` is stubbed."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import faster_whisper
import pytest
from structlog.testing import capture_logs

from recall.base.settings import WorkerSettings
from recall.engines.base import TranscribeRequest
from recall.engines.device import Placement
from recall.engines.simulated import SimulatedEngine
from recall.engines.whisper import model
from recall.media.types import Segment
from recall.resources import Phase
from recall.worker.loop import Worker
from recall_dev.twin.api import MemoryApi
from tests.helpers import wait_for
from tests.unit.fakes import NS, assert_one_given_back, job_manifest, memory_bucket

PAUSE = 0.5  # store_probe_seconds: the first pause after a device failure


class LoadingEngine(SimulatedEngine):
    """Loads a Whisper model at each chunk, as `WhisperEngine` does, then simulates."""

    def __init__(self, source: Path) -> None:
        super().__init__(chunks=2, chunk_delay_seconds=0)
        self.source = str(source)

    def transcribe(self, request: TranscribeRequest) -> list[Segment]:
        model.load_model(self.source, 1, Placement("cuda", "float16"))
        return super().transcribe(request)


class OutOfMemoryOnce:
    """faster-whisper's WhisperModel whose first load finds the GPU full."""

    def __init__(self) -> None:
        self.loads = 0

    def __call__(self, *args: object, **kw: object) -> Any:
        self.loads += 1
        if self.loads == 1:
            raise RuntimeError("CUDA failed with error out of memory")
        return SimpleNamespace(model=SimpleNamespace(device="cuda", compute_type="float16"))


def succeeded(store: MemoryApi) -> int:
    jobs = [store.get_job(NS, n) for n in "ab"]
    return sum(1 for j in jobs if j is not None and j.status.phase == Phase.SUCCEEDED)


def test_worker__a_device_out_of_memory_releases_the_job_and_pauses_claims(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    loads = OutOfMemoryOnce()
    monkeypatch.setattr(faster_whisper, "WhisperModel", loads)
    monkeypatch.setattr(model, "_models", {})
    store = MemoryApi(watch_seconds=1.0)
    for name in "ab":
        store.create_job(NS, job_manifest(name))
    settings = WorkerSettings(
        id="w1", engine="simulated", self_serve_seconds=0.05, store_probe_seconds=PAUSE,
        retry_base_seconds=0.1, max_jobs=3,
    )  # fmt: skip
    worker = Worker(store, settings, LoadingEngine(tmp_path), namespace=NS, results=memory_bucket())
    released = threading.Event()
    seen: dict[str, Any] = {}
    release = worker._release

    def record_release(h: Any) -> None:  # what the worker says while it pauses
        release(h)
        seen["at"] = time.monotonic()
        seen["state"] = worker.engine_state()
        seen["claims"] = worker.claims
        released.set()

    worker._release = record_release  # type: ignore[method-assign]
    claim, claimed_at = worker.claim, []

    def record_claim(job: Any) -> Any:
        claimed_at.append(time.monotonic())
        return claim(job)

    worker.claim = record_claim  # type: ignore[method-assign]
    t = threading.Thread(target=worker.run)
    with capture_logs() as logs:
        t.start()
        try:
            assert released.wait(15), "no job was released"
            wait_for(lambda: succeeded(store) == 2, timeout=15, message="both jobs done")
        finally:
            worker.stop()
            t.join(15)
    assert not t.is_alive()

    state = seen["state"]
    assert state.state == "failed" and state.reason == "DeviceFailed", state
    assert "out of memory" in state.error
    assert_one_given_back(store, "ab")
    assert worker.claims == 3 and seen["claims"] == 1
    assert claimed_at[1] - seen["at"] >= PAUSE * 0.9, "claimed again before the pause ended"
    assert worker.engine_state().state != "failed"  # the pause ended: the registration says so
    events = [e["event"] for e in logs]
    assert events.count("model_load_device_failed") == 1 and events.count("device_failed") == 1
    assert "failed" not in events and "model_load_failed" not in events
    pauses = [e["pause_seconds"] for e in logs if e["event"] == "device_failed"]
    assert pauses[0] >= PAUSE
    store.close()
