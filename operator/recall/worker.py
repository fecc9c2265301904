"""The worker: rent one job at a time under a lease, transcribe it, and hand in the result.

    run():  until stopped
              pick a Queued job from the watched queue → claim (fenced; 409 = someone won)
              → work(job): renew before every engine call, renew with the checkpoint after
                every chunk, a background heartbeater renews during long blocking calls
              → write the transcript ConfigMap → complete (fenced)

Guarantees:
- Every write after the claim goes through `LeaseHandle`, which checks on the object read
  at R that the lease is still ours (holder and token) and writes with resourceVersion R.
  A refusal marks the lease lost; from then on nothing is written for that attempt.
- The work stops within one heartbeat interval of the lease being lost (a refused renew),
  and on its own when no renewal succeeded for the renew deadline (< lease duration): a
  worker cut off from the API server stops before the operator can reclaim its job.
- The transcript is written before `complete`; if `complete` is refused, the transcript is
  deleted and never referenced.
- SIGTERM (`stop()`): no new claims; the current job may finish within `grace_seconds`,
  otherwise its lease is released so the job is Queued again at once.
"""

from __future__ import annotations

import concurrent.futures
import datetime as dt
import random
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from recall import faults, lease, log, metrics
from recall.engines.base import Engine, EngineError, Media, Segment
from recall.kube import (
    TRANSPORT_ERRORS,
    FencedResult,
    Kube,
    KubeError,
    Refused,
    Written,
    fenced_write,
)
from recall.log import short_token
from recall.models import Phase, Progress, Result, TranscriptionJob
from recall.queue import JobQueue
from recall.settings import WorkerSettings
from recall.transcripts import TranscriptStore, assemble, chunks_name

Clock = Callable[[], dt.datetime]
T = TypeVar("T")
TRANSIENT_WRITE_ERRORS: tuple[type[BaseException], ...] = (KubeError, *TRANSPORT_ERRORS)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class LeaseLost(Exception):
    """The lease is no longer ours: refused by the fenced write, or the renew deadline passed."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


class Stopped(Exception):
    """The worker is stopping and the grace period ended: release the lease."""


class LeaseHandle:
    """One held lease: every write of the holder goes through here, one at a time.

    `known` is the job as the API server returned it after our last write; a write starts from
    it (one PATCH when nothing else changed the job) and re-reads only on 409.
    """

    def __init__(
        self,
        kube: Kube,
        job: TranscriptionJob,
        worker: str,
        token: str,
        *,
        clock: Clock,
        renew_deadline: float,
    ) -> None:
        self.kube = kube
        self.known = job
        self.worker = worker
        self.token = token
        self.clock = clock
        self.renew_deadline = renew_deadline
        self.lost = threading.Event()
        self.lost_reason = ""
        self._lock = threading.Lock()
        self._renewed_at = time.monotonic()  # of the last successful write (claim included)
        # Where the time of this attempt goes: lease writes (claim, renewals, complete), the
        # transcript store, the engine. Reported with the outcome.
        self.timings: dict[str, float] = {"lease": 0.0, "store": 0.0, "engine": 0.0, "media": 0.0}
        self.lease_writes = 0
        self.log = log.get("worker").bind(
            job=job.name,
            namespace=job.namespace,
            worker=worker,
            attempt=job.status.attempts,
            token=short_token(token),
        )

    @property
    def name(self) -> str:
        return self.known.name

    @property
    def attempt(self) -> int:
        return self.known.status.attempts

    def seconds_since_renewal(self) -> float:
        return time.monotonic() - self._renewed_at

    def check(self) -> None:
        """Raise `LeaseLost` if the lease is lost or the renew deadline has passed."""
        if not self.lost.is_set() and self.seconds_since_renewal() > self.renew_deadline:
            self._mark_lost("RenewDeadline", f"no renewal for {self.seconds_since_renewal():.1f} s")
        if self.lost.is_set():
            raise LeaseLost(self.lost_reason)

    def _mark_lost(self, reason: str, detail: str, **context: object) -> None:
        if not self.lost.is_set():
            self.lost_reason = reason
            self.lost.set()
            metrics.LEASES_LOST.labels(reason=reason).inc()
            self.log.warning("lease_lost", reason=reason, detail=detail, **context)

    def _write(
        self, action: str, decide: Callable[[TranscriptionJob], lease.Decision]
    ) -> TranscriptionJob:
        """One fenced write of the holder. Transient API errors are retried until the renew
        deadline, which then counts as a lost lease: the outcome is always known in time."""
        with self._lock:
            self.check()
            faults.pause("worker-pause-before-write", action=action)
            started = time.monotonic()
            while True:
                remaining = self.renew_deadline - self.seconds_since_renewal()
                try:
                    result: FencedResult = fenced_write(
                        self.kube,
                        self.known.namespace,
                        self.known.name,
                        decide,
                        known=self.known,
                        action=action,
                        timeout=max(0.5, remaining),
                    )
                    break
                except TRANSIENT_WRITE_ERRORS as e:
                    if isinstance(e, KubeError) and not e.transient:
                        raise
                    self.log.warning("write_error", action=action, error=str(e)[:200])
                    self.check()
                    time.sleep(min(0.5, max(0.05, remaining / 4)))
            self.timings["lease"] += time.monotonic() - started
            self.lease_writes += 1
            if isinstance(result, Refused):
                self._mark_lost(
                    result.refusal.reason,
                    result.refusal.detail,
                    action=action,
                    conflicts=result.conflicts,
                )
                raise LeaseLost(result.refusal.reason, result.refusal.detail)
            assert isinstance(result, Written)
            self.known = result.job
            self._renewed_at = time.monotonic()
            return result.job

    def renew_before_call(self, fresh: float = 1.0) -> None:
        """Renew before an engine call, unless a renewal succeeded in the last `fresh` seconds
        (the checkpoint renewal after the previous chunk already proved the lease is ours)."""
        if self.seconds_since_renewal() >= fresh:
            self.renew()
        else:
            self.check()

    def renew(self, progress: Progress | None = None) -> None:
        started = time.monotonic()
        self._write(
            "renew",
            lambda job: lease.renew(
                job.status, self.clock(), self.worker, self.token, progress=progress
            ),
        )
        metrics.HEARTBEAT_LATENCY.observe(time.monotonic() - started)

    def complete(self, result: Result) -> None:
        self._write(
            "complete",
            lambda job: lease.complete(
                job.status, self.clock(), self.worker, self.token, result=result
            ),
        )

    def fail(
        self, error: EngineError, *, backoff_base: float, backoff_cap: float
    ) -> TranscriptionJob:
        return self._write(
            "fail",
            lambda job: lease.fail(
                job.status,
                self.clock(),
                self.worker,
                self.token,
                reason=error.reason,
                message=error.message,
                permanent=error.permanent,
                max_attempts=job.spec.max_attempts,
                jitter=random.random(),
                backoff_base=backoff_base,
                backoff_cap=backoff_cap,
            ),
        )

    def release(self) -> None:
        self._write(
            "release", lambda job: lease.release(job.status, self.clock(), self.worker, self.token)
        )


class Heartbeater:
    """A named background thread renewing the lease every `interval` while work blocks.

    It sleeps until `interval` after the last successful renewal (by anyone), so it adds no
    writes while the main loop renews after each chunk. After a failed write it retries every
    `interval / 4`. It stops on `stop()`, when the lease is lost, or at the renew deadline.
    """

    def __init__(self, handle: LeaseHandle, interval: float) -> None:
        self.handle = handle
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"heartbeat-{handle.name}", daemon=True
        )

    def __enter__(self) -> Heartbeater:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        h = self.handle
        wait = self.interval
        while not self._stop.wait(max(0.0, wait)):
            due = self.interval - h.seconds_since_renewal()
            if due > 0.05:
                wait = due
                continue
            try:
                h.renew()
                wait = self.interval
            except LeaseLost:
                return
            except Exception as e:  # API unreachable: keep trying until the deadline
                h.log.warning("renew_error", error=str(e))
                try:
                    h.check()
                except LeaseLost:
                    return
                wait = self.interval / 4


class Worker:
    def __init__(
        self,
        kube: Kube,
        settings: WorkerSettings,
        engine: Engine,
        *,
        namespace: str,
        clock: Clock = utcnow,
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.engine = engine
        self.namespace = namespace
        self.clock = clock
        self.store = TranscriptStore(kube)
        self.queue = JobQueue(
            kube,
            namespace,
            engine.name,
            window=settings.pick_window,
            relist_seconds=settings.relist_seconds,
        )
        self.stopping = threading.Event()
        self._stop_deadline: float | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="engine")
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
        self.log.info("worker_started", engine=self.engine.label(), namespace=self.namespace)
        idle_since = time.monotonic()
        try:
            while not self.stopping.is_set():
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
            self._executor.shutdown(wait=False, cancel_futures=True)
            self.log.info(
                "worker_stopped",
                jobs=self.jobs_done,
                claims=self.claims,
                claim_conflicts=self.claim_conflicts,
            )
        return 0

    def run_once(self) -> bool:
        """Try to claim one job and work it. True if a job was claimed."""
        job = self.queue.pick()
        if job is None:
            return False
        handle = self.claim(job)
        if handle is None:
            return True  # lost the race; look again at once
        self.work(handle)
        self.jobs_done += 1
        return True

    # -- claim -------------------------------------------------------------------------------

    def claim(self, job: TranscriptionJob) -> LeaseHandle | None:
        token = lease.new_token()
        started = time.monotonic()
        result = fenced_write(
            self.kube,
            job.namespace,
            job.name,
            lambda j: lease.claim(
                j.status,
                self.clock(),
                self.settings.id,
                token,
                lease_seconds=j.spec.lease_duration_seconds,
                max_attempts=j.spec.max_attempts,
                suspended=j.suspended,
            ),
            known=job,
            retry_on_conflict=False,
            action="claim",
        )
        if isinstance(result, Refused):
            self.queue.discard(job)
            if result.conflicts:
                self.claim_conflicts += 1
                metrics.CLAIM_CONFLICTS.inc()
            self.log.debug("claim_refused", job=job.name, reason=result.refusal.reason)
            return None
        assert isinstance(result, Written)
        self.claims += 1
        metrics.CLAIMS.inc()
        claimed = result.job
        lease_seconds = claimed.spec.lease_duration_seconds
        handle = LeaseHandle(
            self.kube,
            claimed,
            self.settings.id,
            token,
            clock=self.clock,
            renew_deadline=lease_seconds * self.settings.renew_deadline_fraction,
        )
        handle.timings["lease"] += time.monotonic() - started
        handle.lease_writes += 1
        handle.log.info("claimed", lease_seconds=lease_seconds)
        return handle

    # -- work --------------------------------------------------------------------------------

    def work(self, h: LeaseHandle) -> None:
        """Transcribe the leased job and hand in the result; never raises for the job's faults."""
        interval = h.known.spec.lease_duration_seconds * self.settings.heartbeat_fraction
        cancel = threading.Event()
        try:
            with Heartbeater(h, interval):
                outcome = self._transcribe(h, cancel)
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
        except Exception as e:  # a bug or an unexpected API error: let the job retry elsewhere
            cancel.set()
            h.log.exception("work_error")
            self._fail(h, EngineError("WorkerError", f"{type(e).__name__}: {e}", permanent=False))

    def _transcribe(self, h: LeaseHandle, cancel: threading.Event) -> str:
        job = h.known
        progress = job.status.progress
        done_before = progress.chunks_done if progress else 0
        checkpoint = progress.checkpoint if progress else None
        t = h.timings
        clock = time.monotonic()
        segments = self.store.load_checkpoint(job, checkpoint, done_before)
        t["store"] += time.monotonic() - clock

        clock = time.monotonic()
        media: Media = self._call(h, cancel, lambda: self.engine.load_media(job))
        t["media"] += time.monotonic() - clock
        total = len(media.chunks)
        if segments:
            # Resume: carry the checkpointed chunks into this attempt's own ConfigMap.
            clock = time.monotonic()
            checkpoint = self.store.save_chunks(job, h.attempt, segments)
            t["store"] += time.monotonic() - clock
            h.log.info("resumed", chunks_done=done_before, chunks_total=total)
        h.renew(Progress.of(len(segments), total, checkpoint))

        for chunk in media.chunks:
            if chunk.index in segments:
                continue
            self._check_stop(h)
            h.renew_before_call()  # before the (possibly paid) engine call
            clock = time.monotonic()
            result: list[Segment] = self._call(
                h,
                cancel,
                lambda c=chunk: self.engine.transcribe(  # type: ignore[misc]
                    c, language=job.spec.language, cancel=cancel, job=job, attempt=h.attempt
                ),
            )
            t["engine"] += time.monotonic() - clock
            metrics.ENGINE_CHUNKS.labels(engine=self.engine.name).inc()
            shifted = [
                s.model_copy(update={"start": s.start + chunk.start, "end": s.end + chunk.start})
                for s in result
            ]
            segments[chunk.index] = shifted
            h.check()
            clock = time.monotonic()
            checkpoint = self.store.save_chunks(job, h.attempt, {chunk.index: shifted})
            t["store"] += time.monotonic() - clock
            h.renew(Progress.of(len(segments), total, checkpoint))
            h.log.info(
                "chunk_done", chunk=chunk.index, chunks_done=len(segments), chunks_total=total
            )
            faults.hit("worker-after-chunk", chunk=len(segments))

        transcript = assemble(segments, media.duration, self.engine.label())
        h.check()
        clock = time.monotonic()
        name = self.store.save_transcript(job, h.attempt, transcript)
        t["store"] += time.monotonic() - clock
        result_ref = Result(
            config_map=name,
            attempt=h.attempt,
            worker=h.worker,
            engine=transcript.engine,
            words=transcript.words,
            duration_seconds=round(media.duration, 3),
        )
        faults.hit("worker-before-complete")
        try:
            h.complete(result_ref)
        except LeaseLost:
            self.store.delete(job.namespace, name)  # an orphan nobody references
            h.log.warning("complete_refused_transcript_deleted", config_map=name)
            raise
        h.log.info(
            "completed",
            config_map=name,
            words=transcript.words,
            audio_seconds=round(media.duration, 2),
            lease_writes=h.lease_writes,
            **{f"{k}_seconds": round(v, 3) for k, v in t.items()},
        )
        self._cleanup_chunks(job, h.attempt)
        return "succeeded"

    def _call(self, h: LeaseHandle, cancel: threading.Event, fn: Callable[[], T]) -> T:
        """Run `fn` on the engine thread; return early if the lease is lost or grace ends."""
        future = self._executor.submit(fn)
        while True:
            try:
                return future.result(timeout=0.1)
            except concurrent.futures.TimeoutError:
                try:
                    h.check()  # lock-free: lost, or the renew deadline passed
                    if not self._grace_over():
                        continue
                    raise Stopped() from None
                except (LeaseLost, Stopped):
                    cancel.set()
                    # The engine thread may still be busy; a new one serves the next job.
                    self._executor.shutdown(wait=False, cancel_futures=True)
                    self._executor = concurrent.futures.ThreadPoolExecutor(
                        1, thread_name_prefix="engine"
                    )
                    raise

    def _grace_over(self) -> bool:
        return self._stop_deadline is not None and time.monotonic() > self._stop_deadline

    def _check_stop(self, h: LeaseHandle) -> None:
        h.check()
        if self._grace_over():
            raise Stopped()

    def _release(self, h: LeaseHandle) -> None:
        try:
            h.release()
            h.log.info("released")
            metrics.JOBS_FINISHED.labels(outcome="released").inc()
        except (LeaseLost, KubeError) as e:
            h.log.warning("release_failed", error=str(e))

    def _fail(self, h: LeaseHandle, error: EngineError) -> None:
        try:
            job = h.fail(
                error,
                backoff_base=self.settings.retry_base_seconds,
                backoff_cap=self.settings.retry_cap_seconds,
            )
        except (LeaseLost, KubeError) as e:
            h.log.warning("fail_not_recorded", error=str(e))
            return
        requeued = job.status.phase is Phase.QUEUED
        metrics.JOBS_FINISHED.labels(outcome="retry" if requeued else "failed").inc()
        h.log.warning(
            "failed",
            reason=error.reason,
            permanent=error.permanent,
            requeued=requeued,
            message=error.message,
            not_before=job.status.not_before.isoformat() if job.status.not_before else None,
        )

    def _cleanup_chunks(self, job: TranscriptionJob, attempts: int) -> None:
        """Chunk ConfigMaps are not needed once the transcript is accepted (best effort)."""
        for attempt in range(1, attempts + 1):
            try:
                self.store.delete(job.namespace, chunks_name(job.name, attempt))
            except Exception as e:
                self.log.debug("chunk_cleanup_failed", error=str(e))
