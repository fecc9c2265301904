"""The engine interface: open a job's media, cut it lazily into chunks, transcribe each chunk.

Contract:
- `load_media(job)` fetches and probes the source once per attempt, without decoding it, and
  returns a `Media`: a context manager that must be closed (it may own a downloaded file). It
  raises `JobFailure`, `permanent=True` when retrying cannot help (missing file, 404,
  undecodable media, longer than allowed), else `permanent=False` (timeouts, 5xx).
- `Media.chunks(resume)` decodes and cuts lazily, one chunk at a time: memory stays bounded by
  a chunk whatever the duration. Cutting, resuming and `Media.duration`: `recall.media.types`.
- Every call about chunks takes one frozen `TranscribeRequest`; an engine that changes a part
  (no prompt, one chunk of a batch) makes a new one (`replace`).
- `transcribe(request)` transcribes `request.chunk`, blocks until done and returns segments
  timed from the chunk's start. `context` is the text of the last earlier chunk with text (""
  for the first; a silent chunk does not clear it; on a resume, the checkpoint's, so a resumed
  attempt gets what an uninterrupted one would): an engine may condition on it. Once `cancel`
  is set it may return early, with anything: the caller has lost the lease and discards it.
- `detect_language(request)` judges the file's language from `request.chunk`: a `Detected`, or
  None when the chunk holds no speech (ask again with the next). The worker asks once per file
  while the job's language is empty or `auto` (a batch's chunks in turn until one answers),
  records the answer in the chunk records (a resume goes on in it) and passes it to every
  `transcribe` and `transcribe_batch`: a whole batch in it, its silent first chunks too. An
  engine that cannot detect answers None and transcribes without a language; the result then
  records none.
- `model_of(job)`: the model and its digest for the result (None when unknown);
  `device_of(job)`: the device and compute type its model ran with (None for an engine that
  runs no model here: a remote API, the simulated one).
- `transcribe_batch(request)` transcribes up to `batch_size` consecutive chunks in one call (an
  accelerator is filled by a batch, not one 30 s window), each chunk's segments relative to it;
  one-chunk engines answer it with `transcribe_each`. Within a batch `context` is the text
  before the batch: a chunk cannot condition on the one before it.
- Engines are created once per worker process. `transcribe` and `transcribe_batch` may be
  called from several threads at once (a worker's slots); an engine serializes what its
  backend cannot do in parallel.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from recall.media.types import Chunk, Media, Segment, text_of
from recall.resources import TranscriptionJob


def primary_language(language: str | None) -> str | None:
    """The ISO 639-1 code engines take: the primary subtag, lower case ("en-US" → "en")."""
    if not language:
        return None
    return language.replace("_", "-").split("-", 1)[0].strip().lower() or None


@dataclass(frozen=True)
class Detected:
    """A file's language and the model's probability for it: None when nothing was detected (an
    English-only model's own language) or the engine gives none (an OpenAI-compatible server);
    0 for an option picked with nothing detected for it (flagged LanguageUncertain)."""

    language: str
    probability: float | None


@dataclass(frozen=True)
class TranscribeRequest:
    """One engine call: consecutive chunks of one media (up to `batch_size`, for
    `transcribe_batch`; else one), their job and attempt, `cancel` (set when the lease is lost),
    the language (None: none known) and `context` (see the module contract)."""

    chunks: tuple[Chunk, ...]
    job: TranscriptionJob
    cancel: threading.Event
    attempt: int = 1
    language: str | None = None
    context: str = ""

    @classmethod
    def of(
        cls,
        chunks: Chunk | Sequence[Chunk],
        *,
        job: TranscriptionJob,
        cancel: threading.Event | None = None,
        attempt: int = 1,
        language: str | None = None,
        context: str = "",
    ) -> TranscribeRequest:
        """A request for one chunk or a sequence of them (a fresh `cancel` when none)."""
        many = (chunks,) if isinstance(chunks, Chunk) else tuple(chunks)
        return cls(many, job, cancel or threading.Event(), attempt, language, context)

    @property
    def chunk(self) -> Chunk:
        """The first (for `transcribe`, the only) chunk."""
        return self.chunks[0]


class Engine(Protocol):
    name: str
    batch_size: int  # chunks `transcribe_batch` takes at once (1: one chunk a call)

    def label(self) -> str:
        """Engine and model, as recorded in status.result.engine."""
        ...

    def load_media(self, job: TranscriptionJob) -> Media: ...

    def transcribe(self, request: TranscribeRequest) -> list[Segment]: ...

    def transcribe_batch(self, request: TranscribeRequest) -> list[list[Segment]]: ...

    def detect_language(self, request: TranscribeRequest) -> Detected | None: ...

    def model_of(self, job: TranscriptionJob) -> tuple[str, str] | None: ...

    def device_of(self, job: TranscriptionJob) -> tuple[str, str] | None: ...


def transcribe_each(engine: Engine, request: TranscribeRequest) -> list[list[Segment]]:
    """`transcribe_batch` for an engine that takes one chunk a call: each in turn, the text of
    one the context of the next."""
    out: list[list[Segment]] = []
    context = request.context
    for chunk in request.chunks:
        if request.cancel.is_set():
            break
        segments = engine.transcribe(replace(request, chunks=(chunk,), context=context))
        out.append(segments)
        context = text_of(segments) or context
    return out
