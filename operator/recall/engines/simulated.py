"""The simulated engine: no audio, configurable time per chunk, blocking calls and failures.

For tests and benchmarks of the control plane. Settings come from the job's
`spec.engine.simulate` and fall back to the worker's defaults. Every transcribed chunk is
appended as one JSON line to `record_path` when set (`RECALL_SIMULATED_RECORD`), so tests can
count engine runs across worker processes and compare them with accepted results.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from recall.engines.base import Chunk, EngineError, Media, Segment
from recall.models import SimulateSpec, TranscriptionJob

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog"]


class SimulatedEngine:
    name = "simulated"

    def __init__(
        self,
        *,
        chunks: int = 3,
        chunk_delay_seconds: float = 0.05,
        chunk_seconds: float = 30.0,
        record_path: Path | None = None,
    ) -> None:
        self.default = SimulateSpec(chunks=chunks, chunk_delay_seconds=chunk_delay_seconds)
        self.chunk_seconds = chunk_seconds
        self.record_path = record_path

    def label(self) -> str:
        return "simulated"

    def _spec(self, job: TranscriptionJob) -> SimulateSpec:
        spec = job.spec.engine.simulate if job.spec.engine else None
        if spec is None:
            return self.default
        return self.default.model_copy(update=spec.model_dump(exclude_none=True))

    def load_media(self, job: TranscriptionJob) -> Media:
        n = self._spec(job).chunks or 1
        seconds = float(
            job.spec.engine.chunk_seconds
            if job.spec.engine and job.spec.engine.chunk_seconds
            else self.chunk_seconds
        )
        chunks = [Chunk(index=i, start=i * seconds, duration=seconds) for i in range(n)]
        return Media(chunks=chunks, duration=n * seconds)

    def transcribe(
        self,
        chunk: Chunk,
        *,
        language: str | None,
        cancel: threading.Event,
        job: TranscriptionJob,
        attempt: int,
    ) -> list[Segment]:
        del language
        spec = self._spec(job)
        if chunk.index == 0 and spec.block_seconds:
            # A truly blocking call: it ignores `cancel`, like a C extension would.
            time.sleep(spec.block_seconds)
        if spec.chunk_delay_seconds:
            cancel.wait(spec.chunk_delay_seconds)
        failing = spec.failure is not None and (
            not spec.fail_attempts or attempt <= spec.fail_attempts
        )
        if failing and chunk.index == (spec.fail_at_chunk or 0):
            permanent = spec.failure == "permanent"
            raise EngineError(
                "SimulatedPermanentFailure" if permanent else "SimulatedFailure",
                f"simulated {spec.failure} failure at chunk {chunk.index}",
                permanent=permanent,
            )
        self._record(job, attempt, chunk)
        text = " ".join(WORDS[(chunk.index + i) % len(WORDS)] for i in range(6))
        return [
            Segment(start=0.0, end=chunk.duration, text=f"{job.name} chunk {chunk.index} {text}")
        ]

    def _record(self, job: TranscriptionJob, attempt: int, chunk: Chunk) -> None:
        if self.record_path is None:
            return
        line = (
            json.dumps(
                {"job": job.name, "attempt": attempt, "chunk": chunk.index, "pid": os.getpid()}
            )
            + "\n"
        )
        fd = os.open(self.record_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
