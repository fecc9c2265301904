"""The simulated engine's time: its chunks' delays and its blocking call pass on its clock."""

from __future__ import annotations

import threading

import pytest

from recall.engines.base import TranscribeRequest
from recall.engines.simulated import SimulatedEngine
from recall.resources import TranscriptionJob
from recall_dev.twin.clock import FakeClock


def test_simulated__delays_and_the_blocking_call_pass_on_the_engines_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock()
    waited: list[float | None] = []

    def wait(event: threading.Event, timeout: float | None) -> bool:
        waited.append(timeout)
        clock.step(timeout or 0.0)
        return False  # waited out: the lease was not lost

    monkeypatch.setattr(clock, "wait", wait)
    engine = SimulatedEngine(chunks=3, chunk_delay_seconds=2.0, batch_size=3, clock=clock)
    spec = {"source": {"url": "file:///a.wav"}, "engine": {"simulate": {"blockSeconds": 5}}}
    job = TranscriptionJob.from_api({"metadata": {"name": "j1"}, "spec": spec})
    chunks = list(engine.load_media(job).chunks())

    [segment] = engine.transcribe(TranscribeRequest.of(chunks[0], job=job))
    assert "j1 chunk 0" in segment.text
    assert (clock.slept, waited) == ([5.0], [2.0])  # the blocking call, then the chunk's delay

    assert len(engine.transcribe_batch(TranscribeRequest.of(chunks, job=job))) == 3
    assert waited[-1] == 2.0 * (1 + 2 * engine.batch_cost)  # one call for the batch
    assert clock.monotonic() == 1000.0 + 5.0 + 2.0 + 3.0
