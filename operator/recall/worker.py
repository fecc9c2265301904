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
import random
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from recall import faults, log, metrics
from recall.engines.base import Engine, EngineError, Media, Segment
from recall.holder import Heartbeater, LeaseHolder, LeaseLost, Monotonic, boottime
from recall.models import Phase, Progress, Result, TranscriptionJob
from recall.queue import JobQueue, OfferQueue, Queue
from recall.registration import Registration
from recall.settings import WorkerSettings
from recall.store import PERMANENT_ERRORS, Store, StoreError, Unavailable
from recall.transcripts import TranscriptStore, assemble, chunks_name

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
        done_before = progress.chunks_done if progress else 0
        checkpoint = progress.checkpoint if progress else None
        segments = self._store(
            h,
            watch,
            lambda: self.transcripts.load_checkpoint(job, checkpoint, done_before),
        )
        media: Media = watch.timed(
            "media", lambda: self._call(h, cancel, lambda: self.engine.load_media(job))
        )
        total = len(media.chunks)
        if segments:
            # Resume: carry the checkpointed chunks into this attempt's own ConfigMap.
            checkpoint = self._store(
                h, watch, lambda: self.transcripts.save_chunks(job, h.attempt, segments)
            )
            h.log.info("resumed", chunks_done=done_before, chunks_total=total)
        watch.timed("lease", lambda: h.renew(Progress.of(len(segments), total, checkpoint)))

        for chunk in media.chunks:
            if chunk.index in segments:
                continue
            self._check_stop(h)
            watch.timed("lease", lambda: h.renew_if_older(1.0))  # before the (paid) call
            result: list[Segment] = watch.timed(
                "engine",
                lambda c=chunk: self._call(  # type: ignore[misc]
                    h,
                    cancel,
                    lambda: self.engine.transcribe(
                        c, language=job.spec.language, cancel=cancel, job=job, attempt=h.attempt
                    ),
                ),
            )
            metrics.ENGINE_CHUNKS.labels(engine=self.engine.name).inc()
            shifted = [
                s.model_copy(update={"start": s.start + chunk.start, "end": s.end + chunk.start})
                for s in result
            ]
            segments[chunk.index] = shifted
            h.check()
            checkpoint = self._store(
                h,
                watch,
                lambda i=chunk.index, seg=shifted: self.transcripts.save_chunks(  # type: ignore[misc]
                    job, h.attempt, {i: seg}
                ),
            )
            done = Progress.of(len(segments), total, checkpoint)
            watch.timed("lease", lambda p=done: h.renew(p))  # type: ignore[misc]
            h.log.info(
                "chunk_done", chunk=chunk.index, chunks_done=len(segments), chunks_total=total
            )
            faults.hit("worker-after-chunk", chunk=len(segments))

        transcript = assemble(segments, media.duration, self.engine.label())
        h.check()
        name = self._store(
            h, watch, lambda: self.transcripts.save_transcript(job, h.attempt, transcript)
        )
        result_ref = Result(
            config_map=name,
            worker=h.worker,
            engine=transcript.engine,
            words=transcript.words,
            duration_seconds=round(media.duration, 3),
        )
        faults.hit("worker-before-complete")
        try:
            watch.timed("lease", lambda: h.complete(result_ref))
        except LeaseLost:
            self._discard_transcript(h, name)
            raise
        h.log.info(
            "completed",
            config_map=name,
            words=transcript.words,
            audio_seconds=round(media.duration, 2),
            lease_writes=h.writes,
            **watch.fields(),
        )
        self._cleanup_chunks(job, h.attempt)
        return "succeeded"

    def _store(self, h: LeaseHolder, watch: Stopwatch, fn: Callable[[], T]) -> T:
        """A transcript-store call, retried on transient errors while the lease holds."""
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

    def _discard_transcript(self, h: LeaseHolder, name: str) -> None:
        """Delete this attempt's transcript unless the job, read back, references it."""
        try:
            job = self.store.get_job(h.known.namespace, h.known.name)
            if job is not None and job.status.result and job.status.result.config_map == name:
                h.log.warning("complete_refused_transcript_kept", config_map=name)
                return
            self.transcripts.delete(h.known.namespace, name)
            h.log.warning("complete_refused_transcript_deleted", config_map=name)
        except StoreError as e:  # the operator's cleanup removes it later
            h.log.warning("transcript_cleanup_failed", config_map=name, error=e.message[:200])

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

    def _cleanup_chunks(self, job: TranscriptionJob, attempts: int) -> None:
        """Chunk ConfigMaps are not needed once the transcript is accepted (best effort; the
        operator removes what is left)."""
        for attempt in range(1, attempts + 1):
            try:
                self.transcripts.delete(job.namespace, chunks_name(job.name, attempt))
            except StoreError as e:
                self.log.debug("chunk_cleanup_failed", error=e.message[:200])
