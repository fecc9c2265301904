"""The simulated engine: configurable time per chunk, blocking calls and failures; no model.

For tests and benchmarks of the control plane. Settings come from the job's
`spec.engine.simulate`, else the worker's defaults. With `record_path`
(`RECALL_SIMULATED_RECORD`) every transcribed chunk is appended to it as one JSON line, so tests
can count engine runs across worker processes.

The engine's own options (not in the CRD):
- `media`: `load_media` takes the real audio path (`recall.media`) instead of placeholder
  chunks: everything but a model, for benchmarks of long files.
- `batch_size`, `batch_cost`: a batch costs a chunk's delay for its first chunk and `batch_cost`
  of it for each further one (faster-whisper's batched pipeline reports 2 to 4 times the
  throughput of one window at a time).
- `words_per_minute`, `vocabulary` ("english" or "cyrillic"): each chunk gets text at that rate,
  one segment per ~`SEGMENT_SECONDS`, drawn deterministically (the size of real speech in that
  script); without a rate, one short segment naming the job and the chunk.
"""

from __future__ import annotations

import json
import os
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from recall.base.clock import SYSTEM, Clock
from recall.engines.base import Detected, TranscribeRequest
from recall.media.types import Chunk, Cutting, Media, Resume, Segment
from recall.resources import SimulateSpec, TranscriptionJob
from recall.resources.errors import JobFailure

if TYPE_CHECKING:  # PyAV is imported only when the real audio path is chosen
    from recall.media import MediaOptions

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog"]
SEGMENT_SECONDS = 5.0
RATE = 16_000
Vocabulary = Literal["english", "cyrillic"]
ENGLISH = (
    "the council met on tuesday evening to discuss a new budget for public transport and most "
    "members agreed that more buses should run at weekends while others asked about the cost "
    "of repairs to roads bridges and the old railway station near the river"
)
CYRILLIC = (  # Russian-like: the byte size of Cyrillic text, not meant to be read
    "в среду вечером городской совет собрался чтобы обсудить новый бюджет общественного "
    "транспорта и большинство депутатов согласились что по выходным должно ходить больше "
    "автобусов а другие спрашивали о стоимости ремонта дорог мостов и старого вокзала у реки"
)
VOCABULARIES: dict[str, list[str]] = {"english": ENGLISH.split(), "cyrillic": CYRILLIC.split()}


class SimulatedMedia(Media):
    """`n` placeholder chunks of `seconds` each, without audio."""

    def __init__(self, n: int, seconds: float) -> None:
        self.n = n
        self.cutting = Cutting(
            chunk_seconds=seconds, snap_seconds=0.0, rate=RATE, source=f"simulated:{n}"
        )
        self.estimated_samples = n * self.cutting.chunk_samples

    def chunks(
        self, resume: Resume | None = None, cancel: threading.Event | None = None
    ) -> Iterator[Chunk]:
        size = self.cutting.chunk_samples
        for i in range(resume.chunks if resume else 0, self.n):
            if cancel is not None and cancel.is_set():
                return
            yield Chunk(
                index=i,
                start=i * size / RATE,
                duration=size / RATE,
                first=i * size,
                end=(i + 1) * size,
                last=i == self.n - 1,
            )
        self.decoded_samples = self.n * size


class SimulatedEngine:
    name = "simulated"

    def __init__(
        self,
        *,
        chunks: int = 3,
        chunk_delay_seconds: float = 0.05,
        chunk_seconds: float = 30.0,
        record_path: Path | None = None,
        media: MediaOptions | None = None,
        words_per_minute: float | None = None,
        vocabulary: Vocabulary = "english",
        batch_size: int = 1,
        batch_cost: float = 0.25,
        clock: Clock = SYSTEM,
    ) -> None:
        self.default = SimulateSpec(chunks=chunks, chunk_delay_seconds=chunk_delay_seconds)
        self.batch_size = batch_size
        self.batch_cost = batch_cost
        self.chunk_seconds = chunk_seconds
        self.record_path = record_path
        self.media = media
        self.words_per_minute = words_per_minute
        self.words = VOCABULARIES[vocabulary]
        self.clock = clock  # the chunks' delays and the blocking call pass on it

    def label(self) -> str:
        return "simulated"

    def _spec(self, job: TranscriptionJob) -> SimulateSpec:
        spec = job.spec.engine.simulate if job.spec.engine else None
        if spec is None:
            return self.default
        return self.default.model_copy(update=spec.model_dump(exclude_none=True))

    def load_media(self, job: TranscriptionJob) -> Media:
        if self.media is not None:
            from recall.media import load_job_media

            return load_job_media(job, self.media)
        n = self._spec(job).chunks or 1
        seconds = float(
            job.spec.engine.chunk_seconds
            if job.spec.engine and job.spec.engine.chunk_seconds
            else self.chunk_seconds
        )
        return SimulatedMedia(n, seconds)

    def transcribe(self, request: TranscribeRequest) -> list[Segment]:
        chunk, job, attempt = request.chunk, request.job, request.attempt
        spec = self._spec(job)
        if chunk.index == 0 and spec.block_seconds:
            # A truly blocking call: it ignores `cancel`, like a C extension would.
            self.clock.sleep(spec.block_seconds)
        if spec.chunk_delay_seconds:
            self.clock.wait(request.cancel, spec.chunk_delay_seconds)
        self._fail_if_asked(spec, chunk, attempt)
        self._record(request, chunk)
        return self._segments(job, chunk)

    def transcribe_batch(self, request: TranscribeRequest) -> list[list[Segment]]:
        chunks = request.chunks
        spec = self._spec(request.job)
        if spec.chunk_delay_seconds and chunks:
            self.clock.wait(
                request.cancel, spec.chunk_delay_seconds * (1 + (len(chunks) - 1) * self.batch_cost)
            )
        out = []
        for chunk in chunks:
            self._fail_if_asked(spec, chunk, request.attempt)
            self._record(request, chunk)
            out.append(self._segments(request.job, chunk))
        return out

    def _fail_if_asked(self, spec: SimulateSpec, chunk: Chunk, attempt: int) -> None:
        failing = spec.failure is not None and (
            not spec.fail_attempts or attempt <= spec.fail_attempts
        )
        if failing and chunk.index == (spec.fail_at_chunk or 0):
            permanent = spec.failure == "permanent"
            raise JobFailure(
                "SimulatedPermanentFailure" if permanent else "SimulatedFailure",
                f"simulated {spec.failure} failure at chunk {chunk.index}",
                permanent=permanent,
            )

    def _segments(self, job: TranscriptionJob, chunk: Chunk) -> list[Segment]:
        if self.words_per_minute:
            return self._speech(chunk, self.words_per_minute)
        words = " ".join(WORDS[(chunk.index + i) % len(WORDS)] for i in range(6))
        text = f"{job.name} chunk {chunk.index} {words}"
        return [Segment(start=0.0, end=chunk.duration, text=text)]

    def detect_language(self, request: TranscribeRequest) -> Detected | None:
        """Simulated text has no language to detect: the job goes on without one."""
        del request
        return None

    def model_of(self, job: TranscriptionJob) -> tuple[str, str] | None:
        del job
        return None

    def device_of(self, job: TranscriptionJob) -> tuple[str, str] | None:
        del job
        return None

    def _speech(self, chunk: Chunk, words_per_minute: float) -> list[Segment]:
        """Text at `words_per_minute` over the chunk, the same for the same chunk."""
        pick = random.Random(chunk.index)
        n = max(1, round(chunk.duration / SEGMENT_SECONDS))
        length = chunk.duration / n
        count = max(1, round(words_per_minute / 60 * length))
        out = []
        for i in range(n):
            words = [pick.choice(self.words) for _ in range(count)]
            text = " ".join(words).capitalize() + "."
            out.append(Segment(start=i * length, end=(i + 1) * length, text=text))
        return out

    def _record(self, request: TranscribeRequest, chunk: Chunk) -> None:
        """A line of `record_path` for a chunk transcribed: who asked, and what it was given."""
        if self.record_path is None:
            return
        call = {"job": request.job.name, "attempt": request.attempt, "chunk": chunk.index,
                "pid": os.getpid(), "language": request.language,
                "context": request.context}  # fmt: skip
        line = json.dumps(call) + "\n"
        fd = os.open(self.record_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
