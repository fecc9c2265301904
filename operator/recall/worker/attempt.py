"""One attempt at a leased job: the media opened lazily, each chunk through the engine and
into the results store, the lease renewed with the checkpoint after each, the transcript
handed in by `complete`.

`Transcription.run(holder, cancel, watch)` returns when the job is complete; it raises
`LeaseLost` (stop, write nothing more), `Stopped` (the grace period ended: the caller releases),
`JobFailure` (the caller fails the job; a `Storage*` reason when the results store refused for
good: wrong credentials, a missing bucket, a bad URL).

- The first write of an attempt is to the store (how the media is cut), before any engine
  call: a store that refuses is found out before anything is paid for.
- A resume uses the checkpoint only if it was cut the same way from the same source; the
  first chunk then starts at exactly the recorded sample.
- Per chunk: one object written once under the attempt's own key, then the renewal that names
  it in `status.progress.parts`, the only API write. The transcript (and the output formats the
  job asks for) is written before `complete`, whose fenced write alone makes it the result.
  What an attempt wrote and no accepted result references is deleted by the operator.
- Store calls are retried on transient errors while the lease holds (the heartbeater keeps it
  renewed): a store that is down or slow delays the job, never the worker. A refusal (access,
  a missing bucket) is never retried.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Protocol, TypeVar

from recall.base import faults, metrics
from recall.bucket import Bucket, StoreError, StoreUnavailable
from recall.engines.base import Engine
from recall.media import ResumeInvalid
from recall.media.types import Chunk, Media, Segment
from recall.resources import Part, Progress, Result
from recall.resources.errors import JobFailure
from recall.transcripts import AttemptWriter, Checkpoint, CheckpointUnusable, read_checkpoint
from recall.worker.holder import LeaseHolder, LeaseLost

T = TypeVar("T")


class Stopped(Exception):
    """The worker is stopping and the grace period ended: release the lease."""


class Stopwatch:
    """Where the time of one attempt goes, by part (lease, store, engine, media)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {"lease": 0.0, "store": 0.0, "engine": 0.0, "media": 0.0}

    def timed(self, part: str, fn: Callable[[], T]) -> T:
        started = time.monotonic()
        try:
            return fn()
        finally:
            self.seconds[part] += time.monotonic() - started

    def fields(self) -> dict[str, float]:
        return {f"{k}_seconds": round(v, 3) for k, v in self.seconds.items()}


class EngineCall(Protocol):
    """Runs `fn` on the engine thread; returns early (raising) when the lease is lost or the
    grace period ends."""

    def __call__(self, h: LeaseHolder, cancel: threading.Event, fn: Callable[[], T]) -> T: ...


class Transcription:
    """Transcribes leased jobs with one engine into one results store."""

    def __init__(
        self,
        results: Bucket,
        engine: Engine,
        call: EngineCall,
        check_stop: Callable[[LeaseHolder], None],
    ) -> None:
        self.results = results
        self.engine = engine
        self.call = call  # runs a function on the engine thread, stopping with the lease
        self.check_stop = check_stop  # raises LeaseLost or Stopped

    def run(self, h: LeaseHolder, cancel: threading.Event, watch: Stopwatch) -> str:
        job = h.known
        checkpoint = self._read_checkpoint(h, watch)
        opening = _Opening()
        try:
            media = watch.timed(
                "media",
                lambda: self.call(h, cancel, lambda: opening.put(self.engine.load_media(job))),
            )
        except BaseException:
            opening.abandon()  # a media opened after we stopped waiting is closed
            raise
        with media:
            return self._transcribe_media(h, cancel, watch, media, checkpoint)

    def _transcribe_media(
        self,
        h: LeaseHolder,
        cancel: threading.Event,
        watch: Stopwatch,
        media: Media,
        checkpoint: Checkpoint | None,
    ) -> str:
        """Cut `media` lazily, transcribe and store each chunk, renew with the checkpoint after
        each, then write the transcript and complete."""
        if checkpoint is not None and (changed := media.cutting.differences(checkpoint.cutting)):
            h.log.warning(
                "checkpoint_discarded", checkpoint=checkpoint.describe(), reason="; ".join(changed)
            )
            checkpoint = None
        writer = AttemptWriter(self.results, h.known, h.attempt, h.token)
        self._transcribe_chunks(h, cancel, watch, media, writer, checkpoint)
        return self._hand_in(h, watch, media, writer)

    def _transcribe_chunks(
        self,
        h: LeaseHolder,
        cancel: threading.Event,
        watch: Stopwatch,
        media: Media,
        writer: AttemptWriter,
        checkpoint: Checkpoint | None,
    ) -> None:
        """Every chunk after the checkpoint through the engine into `writer`, a renewal with
        the checkpoint after each."""
        parts = self._store(
            h, watch, "to store the cutting", lambda: writer.begin(media.cutting, checkpoint)
        )
        resume = checkpoint.resume if checkpoint and checkpoint.chunks else None
        done, position = (resume.chunks, resume.position) if resume else (0, 0)
        total = media.chunks_total(done, position)
        if resume is not None and checkpoint is not None:
            h.log.info(
                "resumed",
                chunks_done=done,
                chunks_total=total,
                from_checkpoint=checkpoint.describe(),
            )
        # The progress so far; a claim made a moment ago already proved the lease is ours, and
        # the first chunk's renewal records the checkpoint.
        watch.timed("lease", lambda: h.renew_if_older(1.0, Progress.of(done, total, parts)))

        chunks = media.chunks(resume, cancel)
        while True:
            self.check_stop(h)
            try:
                chunk = self._next_chunk(h, cancel, watch, chunks)
            except ResumeInvalid as e:  # raised before any chunk: start over from nothing
                h.log.warning("checkpoint_discarded", reason=e.message)
                parts = self._store(
                    h, watch, "to store the cutting", lambda: writer.begin(media.cutting, None)
                )
                done, total = 0, media.chunks_total(0, 0)
                self._renew(h, watch, Progress.of(done, total, parts))
                chunks = media.chunks(None, cancel)
                continue
            if chunk is None:
                break
            segments = self._transcribe_chunk(h, cancel, watch, chunk)
            h.check()
            parts = self._store(
                h,
                watch,
                f"to store chunk {chunk.index}",
                functools.partial(writer.add, chunk, segments),
            )
            done = chunk.index + 1
            total = media.chunks_total(done, chunk.end, finished=chunk.last)
            self._renew(h, watch, Progress.of(done, total, parts))
            h.log.info("chunk_done", chunk=chunk.index, chunks_done=done, chunks_total=total)
            faults.hit("worker-after-chunk", chunk=done)
        if total != done:  # the last chunk was stored by an earlier attempt: say so exactly
            self._renew(h, watch, Progress.of(done, done, writer.parts()))

    def _hand_in(
        self, h: LeaseHolder, watch: Stopwatch, media: Media, writer: AttemptWriter
    ) -> str:
        """Write the transcript (and the output formats), then complete with it (fenced)."""
        h.check()
        output = h.known.spec.output
        formats = list(output.formats) if output else []
        summary = self._store(
            h,
            watch,
            "to store the transcript",
            lambda: writer.finish(media.duration, self.engine.label(), formats),
        )
        result_ref = Result(
            transcript=writer.transcript_key,
            worker=h.worker,
            engine=summary.engine,
            words=summary.words,
            duration_seconds=summary.duration,
        )
        faults.hit("worker-before-complete")
        try:
            watch.timed("lease", lambda: h.complete(result_ref))
        except LeaseLost:
            h.log.warning("complete_refused_transcript_left", transcript=writer.transcript_key)
            raise
        h.log.info(
            "completed",
            transcript=writer.transcript_key,
            words=summary.words,
            chunks=summary.chunks,
            audio_seconds=round(summary.duration, 2),
            lease_writes=h.writes,
            **watch.fields(),
        )
        return "succeeded"

    def _renew(self, h: LeaseHolder, watch: Stopwatch, progress: Progress) -> None:
        watch.timed("lease", lambda: h.renew(progress))

    def _next_chunk(
        self, h: LeaseHolder, cancel: threading.Event, watch: Stopwatch, chunks: Iterator[Chunk]
    ) -> Chunk | None:
        """The next chunk, decoded on the engine thread (a lost lease stops the wait)."""
        return watch.timed("media", lambda: self.call(h, cancel, lambda: next(chunks, None)))

    def _transcribe_chunk(
        self, h: LeaseHolder, cancel: threading.Event, watch: Stopwatch, chunk: Chunk
    ) -> list[Segment]:
        """One engine call (after a renewal, so the lease is fresh before paying), its segments
        moved to the chunk's place in the media."""
        job = h.known
        watch.timed("lease", lambda: h.renew_if_older(1.0))
        result: list[Segment] = watch.timed(
            "engine",
            lambda: self.call(
                h,
                cancel,
                lambda: self.engine.transcribe(
                    chunk, language=job.spec.language, cancel=cancel, job=job, attempt=h.attempt
                ),
            ),
        )
        metrics.ENGINE_CHUNKS.labels(engine=self.engine.name).inc()
        return [
            s.model_copy(update={"start": s.start + chunk.start, "end": s.end + chunk.start})
            for s in result
        ]

    def _read_checkpoint(self, h: LeaseHolder, watch: Stopwatch) -> Checkpoint | None:
        """The checkpoint to resume from, or None (there is none, or it cannot be used)."""
        job = h.known
        progress = job.status.progress
        parts: list[Part] = list(progress.parts) if progress else []
        if not parts:
            return None
        try:
            return self._store(
                h, watch, "to read the checkpoint", lambda: read_checkpoint(self.results, job)
            )
        except CheckpointUnusable as e:
            h.log.warning("checkpoint_discarded", reason=str(e))
            return None

    def _store(self, h: LeaseHolder, watch: Stopwatch, what: str, fn: Callable[[], T]) -> T:
        """A results-store call, retried on transient errors while the lease holds.

        A refusal (access denied, a missing bucket, a bad URL, an object that exists with other
        bytes) is never retried: it becomes a permanent `JobFailure` with the store's reason
        (`StorageAccessDenied`, ...), saying what was refused and why.
        """
        pause = 0.1
        while True:
            try:
                return watch.timed("store", fn)
            except StoreUnavailable as e:
                h.log.warning("store_error", error=e.message[:300])
                metrics.STORE_ERRORS.labels(reason=e.reason).inc()
                h.check()
                self.check_stop(h)
                time.sleep(pause)
                pause = min(pause * 2, 5.0)
            except StoreError as e:
                metrics.STORE_ERRORS.labels(reason=e.reason).inc()
                raise JobFailure(
                    e.reason,
                    f"the results store refused {what} (not retried): {e.message}",
                    permanent=True,
                ) from None


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
