"""The engine interface: open a job's media, cut it lazily into chunks, transcribe each chunk.

Contract:
- `load_media(job)` fetches and probes the source once per attempt and returns a `Media`
  (`recall.media.types`) without decoding it: a context manager that must be closed (it may
  own a downloaded file). It raises `JobFailure` with `permanent=True` when retrying cannot
  help (missing file, 404, undecodable media, longer than allowed) and `permanent=False`
  otherwise (timeouts, 5xx).
- `Media.chunks(resume)` decodes and cuts lazily, one chunk at a time: memory stays bounded
  by a chunk whatever the duration. How chunks are cut and resumed exactly, and what
  `Media.duration` says, is `recall.media.types`' contract; a checkpoint records
  `Media.cutting`, and `Media.chunks_total` turns the duration into an honest chunk count.
- Every call about chunks takes one `TranscribeRequest`: the chunk(s), the job and attempt,
  `cancel`, the language and the context. It is frozen: an engine that changes a part (a
  call without the prompt, one chunk of a batch) makes a new one (`replace`).
- `transcribe(request)` transcribes `request.chunk` (a request of one chunk), blocks until it
  is done and returns segments with times relative to the start of the chunk. `context` is
  the text of the last chunk before it that has text ("" for the first; a silent chunk does
  not clear it; on a resume, the checkpoint's last chunk with text, so a resumed attempt
  gives the engine what an uninterrupted one would): an engine may condition on it across
  the chunk boundary. It may return early, with anything, once `cancel` is set: the caller
  has lost the lease and discards the result.
- `detect_language(request)` judges the file's language from `request.chunk`: a
  `Detected` (its probability None when there is none to give), or None when the chunk holds
  no speech to judge (ask again with the next). The worker asks once per file while the job's
  language is empty or `auto`, records the answer in the chunk records (so a resume goes on in
  it) and passes it to every `transcribe`. An engine that cannot detect answers None and
  transcribes without a language; the result then records no language. `model_of(job)`
  names the model and its digest (None when the engine does not know them) for the result;
  `device_of(job)` the device and compute type its model ran with (None for an engine that
  runs no model here: a remote API, the simulated one).
- `transcribe_batch(request)` transcribes up to `batch_size` consecutive chunks in one call,
  each chunk's segments relative to it (an accelerator is filled by a batch, not by one
  30-second window); engines that take one chunk at a time answer it with `transcribe_each`.
  Within a batch, a chunk cannot condition on the text of the chunk before it: `context` is
  the text before the batch.
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
    """The language of a file, with the model's probability for it when it was detected: None
    when nothing was detected (an English-only model's own language) or the engine reports no
    probability (an OpenAI-compatible server)."""

    language: str
    probability: float | None


@dataclass(frozen=True)
class TranscribeRequest:
    """One engine call: consecutive chunks of one media (one for `transcribe` and
    `detect_language`, up to the engine's `batch_size` for `transcribe_batch`), the job and
    attempt they belong to, the event that says the lease is lost, the language to transcribe
    in (None: none known) and the text before the first chunk (`context`, see the contract)."""

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
