"""The engine interface: open a job's media, cut it lazily into chunks, transcribe each chunk.

Contract:
- `load_media(job)` fetches and probes the source once per attempt and returns a `Media`
  (`recall.media.types`) without decoding it: a context manager that must be closed (it may
  own a downloaded file). It raises `JobFailure` with `permanent=True` when retrying cannot
  help (missing file, 404, undecodable media, longer than allowed) and `permanent=False`
  otherwise (timeouts, 5xx).
- `Media.chunks(resume)` decodes and cuts lazily, one chunk at a time: memory stays bounded
  by a chunk whatever the duration. Chunks are in order, contiguous, and each records the
  sample range it covers (`first`, `end`, at `Media.cutting.rate`). The same source cut with
  the same `Cutting` always yields the same chunks, so a `Resume` taken from chunk `k`
  (`Chunk.resume()`) continues exactly at the first sample after it: no gap, no overlap.
- `Media.cutting` says what the chunks were cut with (chunk length, snap window, sample
  rate, a fingerprint of the source). A checkpoint records it; a resume is only valid with an
  equal `Cutting` (`Cutting.differences` says why not).
- `Media.duration` is an estimate from the container until the iteration has ended, then the
  exact decoded length; `Media.chunks_total` turns it into an honest chunk count.
- `transcribe(chunk, language, cancel, context)` blocks until the chunk is done and returns
  segments with times relative to the start of the chunk. `context` is the text of the chunk
  before it ("" for the first; on a resume, the checkpoint's last chunk): an engine may
  condition on it across the chunk boundary. It may return early, with anything, once
  `cancel` is set: the caller has lost the lease and discards the result.
- `detect_language(chunk, job, cancel)` judges the file's language from one chunk: a
  `Detected`, or None when the chunk holds no speech to judge (ask again with the next). The
  worker asks once per file while the job's language is empty or `auto`, records the answer
  in the chunk records (so a resume goes on in it) and passes it to every `transcribe`. An
  engine that cannot detect answers None and transcribes without a language. `model_of(job)`
  names the model and its digest (None when the engine does not know them) for the result.
- Engines are created once per worker process and used by one thread at a time.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol

from recall.media.types import Chunk, Media, Segment
from recall.resources import TranscriptionJob


def primary_language(language: str | None) -> str | None:
    """The ISO 639-1 code engines take: the primary subtag, lower case ("en-US" → "en")."""
    if not language:
        return None
    return language.replace("_", "-").split("-", 1)[0].strip().lower() or None


@dataclass(frozen=True)
class Detected:
    """The language detected for a file, with the model's probability for it."""

    language: str
    probability: float


class Engine(Protocol):
    name: str

    def label(self) -> str:
        """Engine and model, as recorded in status.result.engine."""
        ...

    def load_media(self, job: TranscriptionJob) -> Media: ...

    def transcribe(
        self,
        chunk: Chunk,
        *,
        language: str | None,
        cancel: threading.Event,
        job: TranscriptionJob,
        attempt: int,
        context: str = "",
    ) -> list[Segment]: ...

    def detect_language(
        self, chunk: Chunk, *, job: TranscriptionJob, cancel: threading.Event
    ) -> Detected | None: ...

    def model_of(self, job: TranscriptionJob) -> tuple[str, str] | None: ...
