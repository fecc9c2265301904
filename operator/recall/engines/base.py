"""The engine interface: load a job's media as chunks, transcribe one chunk into segments.

Contract:
- `load_media(job)` fetches and prepares the whole source once per attempt and returns its
  chunks (audio arrays for the real engines, placeholders for the simulated one). It raises
  `EngineError` with `permanent=True` when retrying cannot help (missing file, 404,
  undecodable media) and `permanent=False` otherwise (timeouts, 5xx).
- `transcribe(chunk, language, cancel)` blocks until the chunk is done and returns segments
  with times relative to the start of the chunk. It may return early, with anything, once
  `cancel` is set: the caller has lost the lease and discards the result.
- Engines are created once per worker process and used by one thread at a time.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

from recall.models import Model, TranscriptionJob


class EngineError(Exception):
    """A failure the job records: `reason` is CamelCase, `permanent` says if a retry can help."""

    def __init__(self, reason: str, message: str, *, permanent: bool) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.permanent = permanent


class Segment(Model):
    start: float
    end: float
    text: str


@dataclass(frozen=True)
class Chunk:
    """One piece of the media: `index` from 0, `start` and `duration` in seconds."""

    index: int
    start: float
    duration: float
    audio: Any = field(default=None, repr=False)  # float32 mono 16 kHz samples, or None


@dataclass(frozen=True)
class Media:
    chunks: list[Chunk]
    duration: float


def primary_language(language: str | None) -> str | None:
    """The ISO 639-1 code engines take: the primary subtag, lower case ("en-US" → "en")."""
    if not language:
        return None
    return language.replace("_", "-").split("-", 1)[0].strip().lower() or None


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
    ) -> list[Segment]: ...
