"""The worker: rent one job at a time, transcribe it, hand in the result.

    run():  until stopped
              pick a claimable job from the queue → claim it (`LeaseHolder.claim`; 409 means
              someone else won) → work(holder):
                renew before every engine call, renew with the checkpoint after every chunk,
                a `Heartbeater` renews during long blocking calls;
                write the transcript → complete

Guarantees:
- Every write after the claim goes through the `LeaseHolder`; once the lease is lost the work
  stops within one check interval (0.1 s) and nothing more is written for that attempt.
- The engine runs on its own thread, so a lost lease or the end of the grace period stops the
  work even while an engine call blocks; its late result is discarded.
- The transcript is written before `complete`. It is deleted only when the job, read back,
  does not reference it: nothing an accepted result references is ever deleted.
- Transient API errors (list, watch, claim, renew, complete, the transcript store) delay work by
  seconds with bounded backoff; they never end the worker process. A store that refuses a
  write for good (size, quota, a rule) fails the job permanently instead of paying again.
- SIGTERM (`stop()`): no new claims; the current job may finish within `grace_seconds`,
  otherwise its lease is released so the job is Queued again at once.
"""

from __future__ import annotations

import concurrent.futures
import functools
import itertools
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from recall import faults, log, metrics
from recall.audio import ResumeInvalid
from recall.engines.base import Chunk, Engine, EngineError, Media, Segment
from recall.holder import Heartbeater, LeaseHolder, LeaseLost, Monotonic, boottime
from recall.models import Phase, Progress, Result, TranscriptionJob
from recall.queue import JobQueue, OfferQueue, Queue
from recall.registration import Registration
from recall.settings import WorkerSettings
from recall.store import PERMANENT_ERRORS, Store, StoreError, Unavailable
from recall.transcripts import (
    Checkpoint,
    CheckpointUnusable,
    TranscriptStore,
    TranscriptWriter,
    manifest_name,
    references,
    shard_name,
)

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


class Worker:
    def __init__(
        self,
        store: Store,
        settings: WorkerSettings,
        engine: Engine,
        *,
        namespace: str,
        clock: Monotonic = boottime,
        beat: Callable[[], None] = lambda: None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.engine = engine
        self.namespace = namespace
        self.clock = clock
        self.beat = beat  # called on every turn of the loop (the liveness endpoint)
        self.transcripts = TranscriptStore(store)
        self.queue: Queue
        self.registration: Registration | None = None
        if settings.dispatch == "offers":
            self.queue = OfferQueue(
                store,
                namespace,
                settings.id,
                engine.name,
                self_serve_seconds=settings.self_serve_seconds,
            )
            self.registration = Registration(
                store,
                namespace,
                settings.id,
                engine.name,
                duration=settings.registration_seconds,
                period=settings.registration_seconds / 3,
            )
        else:
            self.queue = JobQueue(
                store,
                namespace,
                engine.name,
                window=settings.pick_window,
                relist_seconds=settings.relist_seconds,
            )
        self.stopping = threading.Event()
        self._stop_deadline: float | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="engine")
        self._api_backoff = 0.0
        self.jobs_done = 0
        self.claims = 0
        self.claim_conflicts = 0
        self.log = log.get("worker").bind(worker=settings.id)

    # -- lifecycle ---------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop taking jobs; let the current one finish within the grace period."""
        if not self.stopping.is_set():
            self._stop_deadline = time.monotonic() + self.settings.grace_seconds
            self.stopping.set()
            self.log.info("worker_stopping", grace_seconds=self.settings.grace_seconds)
            self.queue.stop()

    def run(self) -> int:
        """Take jobs until stopped, idle for `idle_exit_seconds`, or `max_jobs` are done."""
        self.queue.start()
        if self.registration is not None:
            self.registration.start()
        self.log.info(
            "worker_started",
            engine=self.engine.label(),
            namespace=self.namespace,
            dispatch=self.settings.dispatch,
        )
        idle_since = time.monotonic()
        try:
            while not self.stopping.is_set():
                self.beat()
                if self.run_once():
                    idle_since = time.monotonic()
                    if self.settings.max_jobs and self.jobs_done >= self.settings.max_jobs:
                        break
                    continue
                idle = self.settings.idle_exit_seconds
                if idle and time.monotonic() - idle_since > idle:
                    self.log.info("worker_idle_exit", idle_seconds=idle)
                    break
                self.queue.wait(timeout=1.0 if idle else 5.0)
        finally:
            self.queue.stop()
            if self.registration is not None:
                self.registration.stop()
            self._executor.shutdown(wait=False, cancel_futures=True)
            self.log.info(
                "worker_stopped",
                jobs=self.jobs_done,
                claims=self.claims,
                claim_conflicts=self.claim_conflicts,
            )
        return 0

    def run_once(self) -> bool:
        """Try to claim one job and work it. True if a claim was tried."""
        job = self.queue.pick()
        if job is None:
            return False
        holder = self.claim(job)
        if holder is None:
            return True  # lost the race (or the API hiccuped); look again at once
        self.work(holder)
        self.jobs_done += 1
        return True

    # -- claim -------------------------------------------------------------------------------

    def claim(self, job: TranscriptionJob) -> LeaseHolder | None:
        try:
            result = LeaseHolder.claim(
                self.store,
                job,
                self.settings.id,
                renew_deadline_fraction=self.settings.renew_deadline_fraction,
                clock=self.clock,
            )
        except StoreError as e:  # the API server is restarting, say: back off, stay alive
            self._api_backoff = min(max(0.2, self._api_backoff * 2), 5.0)
            self.log.warning("claim_error", job=job.name, error=e.message[:200])
            self.stopping.wait(self._api_backoff * random.uniform(0.5, 1.0))
            return None
        self._api_backoff = 0.0
        if isinstance(result, LeaseHolder):
            self.claims += 1
            metrics.CLAIMS.inc()
            return result
        self.queue.discard(job)
        if result.conflicts:
            self.claim_conflicts += 1
            metrics.CLAIM_CONFLICTS.inc()
        reason = result.refusal.reason if result.refusal else "?"
        self.log.debug("claim_refused", job=job.name, reason=reason)
        return None

    # -- work --------------------------------------------------------------------------------

    def work(self, h: LeaseHolder) -> None:
        """Transcribe the leased job and hand in the result; never raises for the job's faults."""
        interval = h.known.spec.lease_duration_seconds * self.settings.heartbeat_fraction
        cancel = threading.Event()
        watch = Stopwatch()
        try:
            with Heartbeater(h, interval):
                outcome = self._transcribe(h, cancel, watch)
            metrics.JOBS_FINISHED.labels(outcome=outcome).inc()
        except LeaseLost as e:
            cancel.set()
            metrics.JOBS_FINISHED.labels(outcome="lease_lost").inc()
            h.log.warning("work_abandoned", reason=e.reason)
        except Stopped:
            cancel.set()
            self._release(h)
        except EngineError as e:
            self._fail(h, e)
        except PERMANENT_ERRORS as e:
            cancel.set()
            self._fail(h, EngineError("TranscriptRefused", e.message, permanent=True))
        except Exception as e:  # a bug or an unexpected error: let the job retry elsewhere
            cancel.set()
            h.log.exception("work_error")
            self._fail(h, EngineError("WorkerError", f"{type(e).__name__}: {e}", permanent=False))

    def _transcribe(self, h: LeaseHolder, cancel: threading.Event, watch: Stopwatch) -> str:
        job = h.known
        progress = job.status.progress
        checkpoint = self._read_checkpoint(h, watch, progress.checkpoint if progress else None)
        opening = _Opening()
        try:
            media = watch.timed(
                "media",
                lambda: self._call(h, cancel, lambda: opening.put(self.engine.load_media(job))),
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
        job = h.known
        if checkpoint is not None and (changed := media.cutting.differences(checkpoint.cutting)):
            h.log.warning(
                "checkpoint_discarded", checkpoint=checkpoint.name, reason="; ".join(changed)
            )
            checkpoint = None
        writer = self.transcripts.writer(job, h.attempt)
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
            self._check_stop(h)
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
            total = done
            self._renew(h, watch, Progress.of(done, total, name))

        h.check()
        summary = self._store(
            h,
            watch,
            "to store the transcript",
            lambda: writer.finish(media.duration, self.engine.label()),
        )
        result_ref = Result(
            config_map=name,
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
            config_map=name,
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
        return watch.timed("media", lambda: self._call(h, cancel, lambda: next(chunks, None)))

    def _transcribe_chunk(
        self, h: LeaseHolder, cancel: threading.Event, watch: Stopwatch, chunk: Chunk
    ) -> list[Segment]:
        """One engine call (after a renewal, so the lease is fresh before paying), its segments
        moved to the chunk's place in the media."""
        job = h.known
        watch.timed("lease", lambda: h.renew_if_older(1.0))
        result: list[Segment] = watch.timed(
            "engine",
            lambda: self._call(
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
                self._check_stop(h)
                time.sleep(pause)
                pause = min(pause * 2, 2.0)
            except PERMANENT_ERRORS as e:
                raise EngineError(
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

    def _call(self, h: LeaseHolder, cancel: threading.Event, fn: Callable[[], T]) -> T:
        """Run `fn` on the engine thread; return early if the lease is lost or grace ends."""
        future = self._executor.submit(fn)
        while True:
            try:
                return future.result(timeout=0.1)
            except concurrent.futures.TimeoutError:
                try:
                    self._check_stop(h)
                except (LeaseLost, Stopped):
                    cancel.set()
                    # The engine thread may still be busy; a new one serves the next job.
                    self._executor.shutdown(wait=False, cancel_futures=True)
                    self._executor = concurrent.futures.ThreadPoolExecutor(
                        1, thread_name_prefix="engine"
                    )
                    raise

    def _check_stop(self, h: LeaseHolder) -> None:
        h.check()
        if self._stop_deadline is not None and time.monotonic() > self._stop_deadline:
            raise Stopped()

    def _release(self, h: LeaseHolder) -> None:
        try:
            h.release()
            h.log.info("released")
            metrics.JOBS_FINISHED.labels(outcome="released").inc()
        except (LeaseLost, StoreError) as e:
            h.log.warning("release_failed", error=str(e)[:200])

    def _fail(self, h: LeaseHolder, error: EngineError) -> None:
        try:
            job = h.fail(
                error.reason,
                error.message,
                permanent=error.permanent,
                backoff_base=self.settings.retry_base_seconds,
                backoff_cap=self.settings.retry_cap_seconds,
            )
        except (LeaseLost, StoreError) as e:
            h.log.warning("fail_not_recorded", error=str(e)[:200])
            return
        requeued = job.status.phase is Phase.QUEUED
        metrics.JOBS_FINISHED.labels(outcome="retry" if requeued else "failed").inc()
        h.log.warning(
            "failed",
            reason=error.reason,
            permanent=error.permanent,
            requeued=requeued,
            message=error.message,
            backoff_seconds=job.status.backoff_seconds,
        )

    def _cleanup_chunks(self, accepted: TranscriptionJob, writer: TranscriptWriter) -> None:
        """Once the result is accepted, delete by name what earlier attempts wrote that it
        does not reference: their manifests, and their shards up to the first one missing.
        Best effort (a worker may not list ConfigMaps); the operator's cleanup
        (`recall.transcripts.unreferenced`) removes what is left."""
        kept = writer.references()
        namespace, job = accepted.namespace, accepted.name
        try:
            for attempt in range(1, writer.attempt):
                self.transcripts.delete(namespace, manifest_name(job, attempt))
                for n in itertools.count():
                    name = shard_name(job, attempt, n)
                    if name not in kept and not self.transcripts.delete(namespace, name):
                        break
        except StoreError as e:
            self.log.debug("chunk_cleanup_failed", job=job, error=e.message[:200])


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
