"""One attempt at a leased job: the media opened lazily, each chunk through the engine and
into the transcript store, the lease renewed with the checkpoint after each, the transcript
handed in by `complete`.

`Transcription.run(holder, cancel, watch)` returns when the job is complete; it raises
`LeaseLost` (stop, write nothing more), `Stopped` (the grace period ended: the caller releases),
`JobFailure` (the caller fails the job; `TranscriptRefused` when the store refused for good).

- A resume uses the checkpoint only if it was cut the same way from the same source; the
  first chunk then starts at exactly the recorded sample.
- The transcript is written before `complete`. After a refused complete, what this attempt
  wrote is deleted only when the job, read back, does not reference it.
- Store calls are retried on transient errors while the lease holds; a refusal (size, quota,
  a rule) is never retried.
"""

from __future__ import annotations

import functools
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Protocol, TypeVar

from recall.base import faults, log, metrics
from recall.engines.base import Engine
from recall.kube import PERMANENT_ERRORS, Store, StoreError, Unavailable
from recall.media import ResumeInvalid
from recall.media.types import Chunk, Media, Segment
from recall.resources import Progress, Result, TranscriptionJob
from recall.resources.errors import JobFailure
from recall.transcripts import (
    Checkpoint,
    CheckpointUnusable,
    TranscriptStore,
    TranscriptWriter,
    manifest_name,
    references,
    shard_name,
)
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
    """Transcribes leased jobs with one engine into one transcript store."""

    def __init__(
        self,
        store: Store,
        engine: Engine,
        call: EngineCall,
        check_stop: Callable[[LeaseHolder], None],
    ) -> None:
        self.store = store
        self.engine = engine
        self.transcripts = TranscriptStore(store)
        self.call = call  # runs a function on the engine thread, stopping with the lease
        self.check_stop = check_stop  # raises LeaseLost or Stopped

    def run(self, h: LeaseHolder, cancel: threading.Event, watch: Stopwatch) -> str:
        job = h.known
        progress = job.status.progress
        checkpoint = self._read_checkpoint(h, watch, progress.checkpoint if progress else None)
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
        each, then write the transcript's summary and complete."""
        if checkpoint is not None and (changed := media.cutting.differences(checkpoint.cutting)):
            h.log.warning(
                "checkpoint_discarded", checkpoint=checkpoint.name, reason="; ".join(changed)
            )
            checkpoint = None
        writer = self.transcripts.writer(h.known, h.attempt)
        self._transcribe_chunks(h, cancel, watch, media, writer, checkpoint)
        return self._hand_in(h, watch, media, writer)

    def _transcribe_chunks(
        self,
        h: LeaseHolder,
        cancel: threading.Event,
        watch: Stopwatch,
        media: Media,
        writer: TranscriptWriter,
        checkpoint: Checkpoint | None,
    ) -> None:
        """Every chunk after the checkpoint through the engine into `writer`, a renewal with
        the checkpoint after each."""
        name = self._store(
            h, watch, "to store the manifest", lambda: writer.begin(media.cutting, checkpoint)
        )
        resume = checkpoint.resume if checkpoint and checkpoint.chunks else None
        done, position = (resume.chunks, resume.position) if resume else (0, 0)
        total = media.chunks_total(done, position)
        if resume is not None:
            h.log.info(
                "resumed",
                chunks_done=done,
                chunks_total=total,
                from_checkpoint=checkpoint.name if checkpoint else None,
            )
        # The progress so far; a claim made a moment ago already proved the lease is ours, and
        # the first chunk's renewal records the checkpoint.
        watch.timed("lease", lambda: h.renew_if_older(1.0, Progress.of(done, total, name)))

        chunks = media.chunks(resume, cancel)
        while True:
            self.check_stop(h)
            try:
                chunk = self._next_chunk(h, cancel, watch, chunks)
            except ResumeInvalid as e:  # raised before any chunk: start over from nothing
                h.log.warning("checkpoint_discarded", reason=e.message)
                name = self._store(
                    h,
                    watch,
                    "to store the manifest",
                    functools.partial(writer.begin, media.cutting, None),
                )
                done, total = 0, media.chunks_total(0, 0)
                self._renew(h, watch, Progress.of(done, total, name))
                chunks = media.chunks(None, cancel)
                continue
            if chunk is None:
                break
            segments = self._transcribe_chunk(h, cancel, watch, chunk)
            h.check()
            self._store(
                h,
                watch,
                f"to store chunk {chunk.index}",
                functools.partial(writer.add, chunk, segments),
            )
            done = chunk.index + 1
            total = media.chunks_total(done, chunk.end, finished=chunk.last)
            self._renew(h, watch, Progress.of(done, total, name))
            h.log.info("chunk_done", chunk=chunk.index, chunks_done=done, chunks_total=total)
            faults.hit("worker-after-chunk", chunk=done)
        if total != done:  # the last chunk was stored by an earlier attempt: say so exactly
            self._renew(h, watch, Progress.of(done, done, name))

    def _hand_in(
        self, h: LeaseHolder, watch: Stopwatch, media: Media, writer: TranscriptWriter
    ) -> str:
        """Write the transcript's summary, then complete with it (fenced)."""
        h.check()
        summary = self._store(
            h,
            watch,
            "to store the transcript",
            lambda: writer.finish(media.duration, self.engine.label()),
        )
        result_ref = Result(
            config_map=writer.name,
            worker=h.worker,
            engine=summary.engine,
            words=summary.words,
            duration_seconds=summary.duration,
        )
        faults.hit("worker-before-complete")
        try:
            accepted = watch.timed("lease", lambda: h.complete(result_ref))
        except LeaseLost:
            self._discard_transcript(h, writer)
            raise
        h.log.info(
            "completed",
            config_map=writer.name,
            words=summary.words,
            chunks=summary.chunks,
            audio_seconds=round(summary.duration, 2),
            lease_writes=h.writes,
            **watch.fields(),
        )
        self._cleanup_chunks(accepted, writer)
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

    def _read_checkpoint(
        self, h: LeaseHolder, watch: Stopwatch, name: str | None
    ) -> Checkpoint | None:
        """The checkpoint to resume from, or None (there is none, or it cannot be used)."""
        if not name:
            return None
        job = h.known
        try:
            return self._store(
                h,
                watch,
                "to read the checkpoint",
                lambda: self.transcripts.read_checkpoint(job.namespace, name),
            )
        except CheckpointUnusable as e:
            h.log.warning("checkpoint_discarded", checkpoint=name, reason=str(e))
            return None

    def _store(self, h: LeaseHolder, watch: Stopwatch, what: str, fn: Callable[[], T]) -> T:
        """A transcript-store call, retried on transient errors while the lease holds.

        A refusal (`Invalid`, `Forbidden`, `TooLarge`: size, quota, a rule) is never retried:
        it becomes the permanent `TranscriptRefused`, saying what was refused and why.
        """
        pause = 0.1
        while True:
            try:
                return watch.timed("store", fn)
            except Unavailable as e:
                h.log.warning("store_error", error=e.message[:200])
                h.check()
                self.check_stop(h)
                time.sleep(pause)
                pause = min(pause * 2, 2.0)
            except PERMANENT_ERRORS as e:
                raise JobFailure(
                    "TranscriptRefused",
                    f"the API server refused {what} ({type(e).__name__}, not retried): {e.message}",
                    permanent=True,
                ) from None

    def _discard_transcript(self, h: LeaseHolder, writer: TranscriptWriter) -> None:
        """After a refused complete: delete what this attempt wrote, unless the job, read
        back, references it (as its result, or as the checkpoint a next attempt resumes from).
        Best effort, by name (a worker may not list ConfigMaps); the operator's cleanup
        removes what is left. Nothing an accepted result or a checkpoint references is ever
        deleted: when those references cannot be read, nothing is."""
        job = h.known
        try:
            current = self.store.get_job(job.namespace, job.name)
            if current is None:
                return  # deleted: the garbage collector takes its ConfigMaps
            status = current.status
            ref = status.result.config_map if status.result else None
            if ref is None and status.progress is not None:
                ref = status.progress.checkpoint
            kept: set[str] | None = set()
            if ref:
                cm = self.store.get_config_map(job.namespace, ref)
                kept = references(ref, {ref: cm} if cm else {})
            if kept is None or writer.name in kept:
                h.log.warning("complete_refused_transcript_kept", config_map=writer.name)
                return
            for name in sorted(writer.own_names() - kept):
                self.transcripts.delete(job.namespace, name)
            h.log.warning("complete_refused_transcript_deleted", config_map=writer.name)
        except StoreError as e:
            h.log.warning(
                "transcript_cleanup_failed", config_map=writer.name, error=e.message[:200]
            )

    def _cleanup_chunks(self, accepted: TranscriptionJob, writer: TranscriptWriter) -> None:
        """Once the result is accepted, delete by name what earlier attempts wrote that it
        does not reference: their manifests, and their shards up to the first one missing.
        Best effort (a worker may not list ConfigMaps); the operator's cleanup
        (`recall.transcripts.unreferenced`) removes what is left."""
        kept = writer.references()
        namespace, job = accepted.namespace, accepted.name
        h_log = log.get("worker")
        try:
            for attempt in range(1, writer.attempt):
                self.transcripts.delete(namespace, manifest_name(job, attempt))
                for n in itertools.count():
                    name = shard_name(job, attempt, n)
                    if name not in kept and not self.transcripts.delete(namespace, name):
                        break
        except StoreError as e:
            h_log.debug("chunk_cleanup_failed", job=job, error=e.message[:200])


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
