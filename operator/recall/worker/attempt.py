"""One attempt at a leased job: the media opened lazily, its chunks decoded ahead of the engine,
transcribed, stored behind it, checkpointed on the heartbeat's cadence, and the transcript handed
in by `complete`.

`Transcription.run` returns when the job is complete; it raises `LeaseLost` (stop, write nothing
more), `Stopped` (the grace period ended: the caller releases), `JobFailure` (the caller fails
the job; a `Storage*` reason when the results store refused for good).

- The first write of an attempt is to the store (how the media is cut), before any engine
  call: a store that refuses is found out before anything is paid for.
- A resume uses the checkpoint only if it was cut the same way from the same source; the
  first chunk then starts at exactly the recorded sample.
- The engine never waits for the control plane (`recall.worker.pipeline`). Each chunk's object
  is written once under the attempt's own key and, once durable, becomes the holder's
  checkpoint, written on the cadence: no API write per chunk. The fence holds: an engine call
  starts only on a lease proven `fresh` (`recall.worker.cadence`), and once the lease is lost
  every stage stops at once and nothing more is written, to the API server or the store.
- Only the fenced `complete` makes the transcript the result (`recall.worker.hand_in`); what an
  attempt wrote and no accepted result references is deleted by the operator.
- Store calls are retried on transient errors while the lease holds (`recall.worker.storing`).
- On `Stopped`, and on a failure of the engine or the store (or a bug), what the engine already
  transcribed is stored first (a batch or two at most, within `DRAIN_SECONDS`), so the release
  or fail carries it as the checkpoint. A lost lease stores nothing more.
- `progress()` (the worker's liveness beat) is called at each engine call that returns, each
  chunk stored and each chunk the speakers are labelled on: a worker busy with a long job stays
  alive, one whose engine call or store write never returns does not (nothing is called while
  a stage only waits).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from recall.base import metrics
from recall.bucket import Bucket, StoreError
from recall.engines.base import Engine, TranscribeRequest
from recall.media import ResumeInvalid
from recall.media.types import Chunk, Media, Segment
from recall.resources import AUTO, Part, Progress
from recall.resources.errors import JobFailure
from recall.transcripts import (
    AttemptWriter,
    Checkpoint,
    CheckpointUnusable,
    Prompt,
    read_checkpoint,
)
from recall.worker.cadence import Cadence
from recall.worker.deadline import LeaseLost
from recall.worker.engine_thread import EngineThreads, Stopped
from recall.worker.hand_in import hand_in
from recall.worker.holder import LeaseHolder
from recall.worker.pipeline import Decoder, Stopwatch, Storer, Transcribed
from recall.worker.storing import store_call

T = TypeVar("T")
DRAIN_SECONDS = 10.0  # how long a stopping attempt waits for the chunks it already transcribed
DECODE_DEPTH = 2  # chunks decoded ahead of the engine at most (their audio is in memory)
STORE_DEPTH = 4  # transcribed chunks waiting for the store at most (then the engine waits)


class Transcription:
    """Transcribes leased jobs with one engine into one results store."""

    def __init__(
        self,
        results: Bucket,
        engine: Engine,
        threads: EngineThreads,
        progress: Callable[[], None] = lambda: None,
    ) -> None:
        self.results = results
        self.engine = engine
        self.progress = progress  # the work moved on (the module's contract)
        self.call = threads.call  # runs a function on the engine thread, stopping with the lease
        self.check_stop = threads.check_stop  # raises LeaseLost or Stopped

    def run(
        self, h: LeaseHolder, cancel: threading.Event, watch: Stopwatch, cadence: Cadence
    ) -> str:
        job = h.known
        checkpoint = self._read_checkpoint(h, watch)
        opening = _Opening()
        try:
            media = watch.timed(
                "media",
                lambda: self.call(h, cancel, lambda: opening.put(self.engine.load_media(job))),
            )
        except BaseException:
            opening.abandon()  # a media opened after the wait ended is closed
            raise
        with media:
            if checkpoint is not None and (
                changed := media.cutting.differences(checkpoint.cutting)
            ):
                h.log.warning(
                    "checkpoint_discarded",
                    checkpoint=checkpoint.describe(),
                    reason="; ".join(changed),
                )
                checkpoint = None
            writer = AttemptWriter(self.results, h.known, h.attempt, h.token)
            chunks = _Attempt(self, h, cancel, watch, cadence, media, writer).transcribe(checkpoint)
            return hand_in(
                h, watch, self.engine, media, writer, chunks, self.check_stop, self.progress
            )

    def _read_checkpoint(self, h: LeaseHolder, watch: Stopwatch) -> Checkpoint | None:
        """The checkpoint to resume from, or None (there is none, or it cannot be used)."""
        job = h.known
        progress = job.status.progress
        if progress is None or not progress.parts:
            return None
        try:
            read = functools.partial(read_checkpoint, self.results, job)
            return store_call(h, watch, "to read the checkpoint", read, self.check_stop)
        except CheckpointUnusable as e:
            h.log.warning("checkpoint_discarded", reason=str(e))
            return None


@dataclass(eq=False)
class _Attempt:
    """The chunks of one attempt through decode → engine → store; see the module contract."""

    t: Transcription
    h: LeaseHolder
    cancel: threading.Event
    watch: Stopwatch
    cadence: Cadence
    media: Media
    writer: AttemptWriter

    def poll(self) -> None:
        self.t.check_stop(self.h)

    def transcribe(self, checkpoint: Checkpoint | None) -> int:
        """Every chunk after `checkpoint` through the engine into the store; returns the
        media's exact chunk count once all of them are durable."""
        h, media, writer = self.h, self.media, self.writer
        parts = self._store_cutting(checkpoint)
        resume = checkpoint.resume if checkpoint and checkpoint.chunks else None
        if resume is not None and checkpoint is not None:
            h.log.info(
                "resumed",
                chunks_done=resume.chunks,
                chunks_total=media.chunks_total(resume.chunks, resume.position),
                from_checkpoint=checkpoint.describe(),
            )
        done, position = (resume.chunks, resume.position) if resume else (0, 0)
        h.checkpoint(Progress.of(done, media.chunks_total(done, position), parts))
        # The engine's context: the last stored chunk text (redacted, without held words), the
        # same on a resume as in an unbroken run.
        types = writer.redact.types if writer.redact else None
        prompt = Prompt.of(types, checkpoint if resume else None)
        try:
            return self._run(media.chunks(resume, self.cancel), prompt)
        except ResumeInvalid as e:  # raised before any chunk: start over from nothing
            h.log.warning("checkpoint_discarded", reason=e.message)
            parts = self._store_cutting(None)
            h.checkpoint(Progress.of(0, media.chunks_total(0, 0), parts))
            return self._run(media.chunks(None, self.cancel), Prompt.of(types))

    def _store_cutting(self, checkpoint: Checkpoint | None) -> list[Part]:
        begin = functools.partial(self.writer.begin, self.media.cutting, checkpoint)
        return store_call(self.h, self.watch, "to store the cutting", begin, self.t.check_stop)

    def _run(self, chunks: Iterator[Chunk], prompt: Prompt) -> int:
        name, batch = self.h.name, max(1, self.t.engine.batch_size)
        decoder = Decoder(
            chunks,
            self.watch,
            name=f"decode-{name}",
            depth=max(DECODE_DEPTH, batch),  # the next batch decodes beside this one
        )
        # A whole batch is handed over at once: room for two, so the engine does not wait.
        depth = max(STORE_DEPTH, 2 * batch)
        storer = Storer(
            self._store, self._stored, name=f"store-{name}", depth=depth, clock=self.h.clock
        )
        self.storer = storer
        decoder.start()
        storer.start()
        made: list[tuple[Chunk, list[Segment]]] = []  # transcribed, not yet handed to the store
        try:
            try:
                for group in self._batches(decoder, batch):
                    made = list(zip(group, self._transcribe(group, prompt.text), strict=True))
                    while made:
                        chunk, segments = made[0]
                        self._waited(functools.partial(storer.put, chunk, segments, self.poll))
                        made.pop(0)
                        prompt.after(chunk, segments)  # a silent chunk keeps the text
                storer.drain(self.poll)
            except (LeaseLost, ResumeInvalid):
                # lost: write nothing more (finally aborts both); ResumeInvalid: before any chunk
                raise
            except Exception:
                # Stopped, an engine or store failure, or a bug: what the engine made is paid
                # for; store it, so the release or fail carries it as the checkpoint.
                decoder.abort()
                self._drain(storer, made)
                raise
            return self.writer.chunks
        finally:
            decoder.abort(join=1.0)
            storer.abort()

    def _batches(self, decoder: Decoder, size: int) -> Iterator[list[Chunk]]:
        """The decoded chunks in groups of `size` (the last group may be smaller)."""
        group: list[Chunk] = []
        while (chunk := self._waited(lambda: decoder.next(self.poll))) is not None:
            group.append(chunk)
            if len(group) == size or chunk.last:
                yield group
                group = []
        if group:
            yield group

    def _waited(self, fn: Callable[[], T]) -> T:
        """`fn` is the engine's side waiting for a stage: time it as the engine's wait."""
        return self.watch.timed("engine_waits", fn)

    def _drain(self, storer: Storer, made: list[tuple[Chunk, list[Segment]]]) -> None:
        """Store what the engine made (handed over, and `made`, not yet), within
        `DRAIN_SECONDS`; a store that refuses or a lease lost meanwhile ends it."""
        deadline = self.h.clock.monotonic() + DRAIN_SECONDS

        def poll() -> None:
            self.h.check()
            if self.h.clock.monotonic() > deadline:
                raise Stopped()

        try:
            for chunk, segments in made:
                storer.put(chunk, segments, poll)
            storer.drain(poll)
        except (Stopped, LeaseLost, JobFailure, StoreError) as e:
            self.h.log.warning("store_drain_incomplete", error=str(e)[:200])

    def _transcribe(self, chunks: list[Chunk], context: str) -> list[list[Segment]]:
        """One engine call for `chunks` (one chunk, or a batch of them), on a lease proven fresh
        before paying for it; the segments moved to each chunk's place in the media."""
        h, job, watch, engine = self.h, self.h.known, self.watch, self.t.engine
        watch.timed("lease", lambda: h.renew_if_older(self.cadence.fresh))

        def call() -> list[list[Segment]]:
            request = TranscribeRequest.of(
                chunks,
                job=job,
                cancel=self.cancel,
                attempt=h.attempt,
                language=self._language(chunks),
                context=context,
            )
            if len(chunks) == 1 and engine.batch_size <= 1:
                return [engine.transcribe(request)]
            return engine.transcribe_batch(request)

        results = watch.timed("engine", lambda: self.t.call(h, self.cancel, call))
        self.t.progress()  # the engine answered: not hung, whatever it answered
        if len(results) != len(chunks):
            h.check()  # the call returned early because the lease was lost, or:
            raise JobFailure(
                "WorkerError",
                f"the engine answered {len(results)} of {len(chunks)} chunks",
                permanent=False,
            )
        metrics.ENGINE_CHUNKS.labels(engine=engine.name).inc(len(chunks))
        # words move with their segment
        return [[s.shifted(c.start) for s in r] for c, r in zip(chunks, results, strict=True)]

    def _language(self, chunks: list[Chunk]) -> str | None:
        """The job's language, else the file's, detected once at the first chunk with speech (a
        resume has it from the checkpoint) and given to every chunk of the call: a batch whose
        first chunk is silent asks its next ones, never leaving the rest to the engine's own
        detection. Runs on the engine thread."""
        job = self.h.known
        if job.spec.language not in (None, AUTO):
            return job.spec.language
        for chunk in chunks:
            if self.writer.language is not None or self.cancel.is_set():
                break
            found = self.t.engine.detect_language(
                TranscribeRequest.of(chunk, job=job, cancel=self.cancel, attempt=self.h.attempt)
            )
            if found is not None:
                self.writer.detected = (found.language, found.probability)
                self.h.log.info(
                    "language_detected",
                    language=found.language,
                    probability=(
                        round(found.probability, 3) if found.probability is not None else None
                    ),
                    chunk=chunk.index,
                )
        known = self.writer.language
        return known[0] if known else job.spec.language

    # -- the store stage (its own thread) -----------------------------------------------------

    def _store(self, item: Transcribed) -> None:
        chunk = item.chunk
        self.h.check()  # a lost lease writes nothing more, to the store either
        store_call(
            self.h,
            self.watch,
            f"to store chunk {chunk.index}",
            lambda: self.writer.add(chunk, item.segments),
            self.t.check_stop,
            aborted=self.storer.aborted,
        )

    def _stored(self, item: Transcribed) -> None:
        """The chunk is durable: the next renewal may name it."""
        chunk, h = item.chunk, self.h
        done = chunk.index + 1
        total = self.media.chunks_total(done, chunk.end, finished=chunk.last)
        h.checkpoint(Progress.of(done, total, self.writer.parts()))
        self.t.progress()
        h.log.info("chunk_done", chunk=chunk.index, chunks_done=done, chunks_total=total)


class _Opening:
    """Hands a media over from the engine thread; closes it if nobody waits for it any more
    (the lease was lost while it was being fetched), so no download is left behind."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._media: Media | None = None
        self._abandoned = False

    def put(self, media: Media) -> Media:
        with self._lock:
            if self._abandoned:
                media.close()
            else:
                self._media = media
        return media

    def abandon(self) -> None:
        with self._lock:
            self._abandoned = True
            if self._media is not None:
                self._media.close()
