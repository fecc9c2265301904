"""The worker: rent one job at a time in each of its slots, transcribe it, hand in the result.

Each slot (`settings.slots`) loops until stopped: pick a claimable job, claim it (409: another
worker won), work it (`recall.worker.attempt`, a `Heartbeater` beside it), complete.

Guarantees:
- Every write after the claim goes through the `LeaseHolder`; once the lease is lost the work
  stops within one check interval (0.1 s) and nothing more is written for that attempt. A
  lease taken away while the worker works is noticed by `recall.worker.held`, not at the next
  renewal.
- The engine runs on its own thread (`recall.worker.engine_thread`): a lost lease or the end of
  the grace period stops the work even while an engine call blocks.
- Only the fenced complete makes the transcript the result. The worker deletes nothing in the
  store (the operator collects what no accepted result references).
- Transient errors (list, watch, claim, renew, complete, the results store) delay work by
  seconds with bounded backoff; they never end the worker process. A results store that
  refuses for good fails the job it hit, before any engine call; then the worker claims nothing
  until a probe write succeeds (`recall.worker.probes`): one misconfiguration fails one job per
  slot, not the whole queue.
- A model cache the worker cannot write (`ModelCacheUnwritable`) is the worker's fault: the job
  is released (Queued at once, its attempt given back, within `maxReleases`), never failed, at
  most one per slot each time the cache breaks; the worker claims nothing until the probe
  repeats the failed operation with success, and its registration says `failed` meanwhile.
- A device that fails a model's load (`DeviceFailed`: out of memory, a CUDA error) is the
  worker's fault too: the job is released, never failed, and the worker claims nothing for a
  pause that doubles while loads keep failing (`recall.worker.probes.DevicePause`; the
  registration says `failed` meanwhile).
- SIGTERM (`stop()`): no new claims; the current job may finish within `grace_seconds`,
  otherwise its lease is released so the job is Queued again at once.
- Temporary files (downloaded sources) that an earlier worker process left when it died are
  removed when `run` starts, before any claim (`recall.media.fetch.sweep`: /tmp is an emptyDir
  that outlives a container's restart); those of live processes stay.
- Drain (`recall.worker.drain`): once the worker answered a drain request `drained` it picks,
  claims and works nothing until the request is removed; it answers so only between jobs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from recall.base import log, metrics
from recall.base.backoff import Backoff
from recall.base.clock import SYSTEM, Clock
from recall.base.settings import WorkerSettings
from recall.bucket import Bucket
from recall.engines.base import Engine
from recall.engines.device import DeviceFailed
from recall.engines.models import ModelCacheUnwritable
from recall.kube import PERMANENT_ERRORS, Api, ApiError, retry_pause
from recall.media.fetch import sweep
from recall.protocol.workers import FAILED, EngineState
from recall.resources import Phase, TranscriptionJob
from recall.resources.errors import JobFailure
from recall.worker.attempt import Transcription
from recall.worker.cadence import Cadence
from recall.worker.deadline import LeaseLost
from recall.worker.drain import Drain
from recall.worker.engine_thread import EngineThreads, Stopped
from recall.worker.failures import unexpected
from recall.worker.heartbeat import Heartbeater
from recall.worker.held import HeldJobs
from recall.worker.holder import LeaseHolder
from recall.worker.pipeline import Stopwatch
from recall.worker.preload import Preload
from recall.worker.probes import STORE_REFUSALS, CacheProbe, DevicePause, StoreProbe
from recall.worker.queue import Queue, queue_of
from recall.worker.registration import Registration
from recall.worker.slots import Slots

CACHE_PROBE_CAP = 600.0  # seconds between two probes of a model cache at most (each may fetch)
# After a claim the API server could not answer (restarting, or 429): 0.1-0.2 s, doubling to 5 s.
CLAIM_RETRY = Backoff(initial=0.1, cap=2.5, jitter=1.0)


class Worker:
    def __init__(
        self,
        store: Api,
        settings: WorkerSettings,
        engine: Engine,
        *,
        namespace: str,
        results: Bucket,
        clock: Clock = SYSTEM,
        beat: Callable[[], None] = lambda: None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.engine = engine
        self.namespace = namespace
        self.clock = clock
        # The liveness endpoint's: called on every turn of a slot's loop, and by the work at each
        # step it makes (`recall.worker.attempt`), so a long job is no frozen loop.
        self.beat = beat
        self.registration: Registration | None = None
        self.drain = Drain(settings.id, clock=clock)
        # Its outcome rides on the registration's renewals; a cache it cannot write stops claims.
        self.preload = Preload(engine, cache_unwritable=self._preload_cache_unwritable, clock=clock)
        self.queue: Queue = queue_of(store, namespace, settings, engine.name, clock)
        if settings.dispatch == "offers":
            self.registration = Registration(
                store,
                namespace,
                settings.id,
                engine.name,
                duration=settings.registration_seconds,
                period=settings.registration_seconds / 3,
                drain=self.drain,
                pool=settings.pool,
                slots=settings.slots,
                engine_state=self.engine_state,
                clock=clock,
            )
        self.held = HeldJobs(store, namespace, settings.id)
        self.stopping = threading.Event()
        self._stop_deadline: float | None = None
        self.engine_threads = EngineThreads(self._check_stop)
        self._lock = threading.Lock()  # the claim counts
        self.slots = Slots(settings)  # the jobs the slots took, within max_jobs
        self.transcription = Transcription(
            results, engine, self.engine_threads, progress=lambda: self.beat()
        )
        self._claim_failures = 0
        self.claims = 0
        self.claim_conflicts = 0
        self.log = log.get("worker").bind(worker=settings.id)
        self.store_probe = StoreProbe(
            results, settings.id.encode(), settings.store_probe_seconds, clock, self.log
        )
        probes = Backoff(initial=settings.store_probe_seconds, cap=CACHE_PROBE_CAP)
        self.cache = CacheProbe(probes, clock, self.log)
        self.device = DevicePause(probes, clock)

    # -- lifecycle ---------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop taking jobs; let the current one finish within the grace period."""
        if not self.stopping.is_set():
            self._stop_deadline = self.clock.monotonic() + self.settings.grace_seconds
            self.stopping.set()
            self.log.info("worker_stopping", grace_seconds=self.settings.grace_seconds)
            self.queue.stop()

    def run(self) -> int:
        """Take jobs until stopped, idle for `idle_exit_seconds`, or `max_jobs` are done (a claim
        lost to another worker counts none): one loop per slot, each holding one lease at most."""
        removed = sweep()
        if removed:
            self.log.info("temporary_files_removed", files=removed)
        self.queue.start()
        self.held.start()
        if self.registration is not None:
            self.preload.start()
            self.registration.start()
        self.log.info(
            "worker_started",
            engine=self.engine.label(),
            namespace=self.namespace,
            dispatch=self.settings.dispatch,
            pool=self.settings.pool,
            slots=self.settings.slots,
        )
        try:
            if self.settings.slots == 1:
                self._slot_loop()
            else:
                slots = [
                    threading.Thread(target=self._slot_loop, name=f"slot-{i}", daemon=True)
                    for i in range(self.settings.slots)
                ]
                for t in slots:
                    t.start()
                for t in slots:
                    t.join()
        finally:
            self.queue.stop()
            self.held.stop()
            self.preload.stop()
            if self.registration is not None:
                self.registration.stop()
            self.engine_threads.shutdown()
            self.log.info(
                "worker_stopped",
                jobs=self.slots.done,
                claims=self.claims,
                claim_conflicts=self.claim_conflicts,
            )
        return 0

    def _slot_loop(self) -> None:
        """One slot: take a job, work it, and again, until stopped, idle or enough jobs."""
        idle_since = self.clock.monotonic()
        while not self.stopping.is_set() and not self.slots.enough.is_set():
            self.beat()
            seen = self.queue.changes()  # before the pick: an offer after it wakes the wait
            if self.run_once():
                idle_since = self.clock.monotonic()
                continue
            if self.slots.spoken_for():
                return  # every job left to max_jobs is another slot's, which goes on
            idle = self.settings.idle_exit_seconds
            if idle and self.clock.monotonic() - idle_since > idle:
                self.log.info("worker_idle_exit", idle_seconds=idle)
                return
            self.queue.wait(timeout=1.0 if idle else 5.0, since=seen)

    def run_once(self) -> bool:
        """Try to claim one job and work it. True if a claim was tried; a drained worker
        tries none (the turn is held from the pick to the end of the work)."""
        with self.drain.turn() as open_:
            if open_:
                return self._take_one()
        self.drain.pause(1.0)  # drained: nothing to do until the request is removed
        return False

    def engine_state(self) -> EngineState:
        """What the registration says of the engine: `failed` with the model cache's reason
        while the worker cannot write it (or the device's, while its pause lasts), else how its
        own model's load went (the preload)."""
        loaded = self.preload.state()
        broken = self.cache.broken or self.device.broken
        if broken is None:
            return loaded
        return EngineState(FAILED, loaded.model, f"{broken.reason}: {broken.message}")

    def _take_one(self) -> bool:
        if self.store_probe.broken is not None and not self.store_probe.probe():
            return False  # the results store refuses: claim nothing that would fail too
        if self.cache.broken is not None and not self.cache.probe():
            return False  # the model cache cannot be written: claim nothing to give back
        if self.device.broken is not None:
            return False  # the device failed a load: nothing to give back before the pause ends
        if not self.slots.reserve():
            return False  # the jobs left to max_jobs are other slots' to take
        worked = False
        try:
            job = self.slots.pick(self.queue)
            if job is None:
                return False
            try:
                holder = self.claim(job)
                if holder is None:
                    return True  # lost the race (or the API hiccuped); look again at once
                self.work(holder)
                worked = True
            finally:
                self.slots.let_go(job)
        finally:
            self.slots.end(worked=worked)
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
        except ApiError as e:  # the API server is restarting, or busy (429): back off
            self.log.warning("claim_error", job=job.name, error=e.message[:200], status=e.status)
            pause = retry_pause(e, CLAIM_RETRY.delay(self._claim_failures))
            self._claim_failures += 1
            self.clock.wait(self.stopping, pause)
            return None
        self._claim_failures = 0
        if isinstance(result, LeaseHolder):
            with self._lock:
                self.claims += 1
            metrics.CLAIMS.inc()
            return result
        self.queue.discard(job)
        if result.conflicts:
            with self._lock:
                self.claim_conflicts += 1
            metrics.CLAIM_CONFLICTS.inc()
        reason = result.refusal.reason if result.refusal else "?"
        self.log.debug("claim_refused", job=job.name, reason=reason)
        return None

    # -- work --------------------------------------------------------------------------------

    def work(self, h: LeaseHolder) -> None:
        """Transcribe the leased job and hand in the result; never raises for the job's faults."""
        cadence = self.cadence(h.known)
        cancel = threading.Event()
        watch = Stopwatch(self.clock)
        self.held.hold(h)
        try:
            with Heartbeater(h, cadence):
                outcome = self.transcription.run(h, cancel, watch, cadence)
            metrics.JOBS_FINISHED.labels(outcome=outcome).inc()
            self.device.worked()
        except LeaseLost as e:
            cancel.set()
            metrics.JOBS_FINISHED.labels(outcome="lease_lost").inc()
            h.log.warning("work_abandoned", reason=e.reason)
        except Stopped:
            cancel.set()
            self._release(h)
        except ModelCacheUnwritable as e:  # the worker's fault: the job loses no attempt
            cancel.set()
            self._cache_unwritable(h, e)
        except DeviceFailed as e:  # the worker's fault too (out of memory): released
            cancel.set()
            pause = self.device.failed(e)
            h.log.error("device_failed", message=e.message, pause_seconds=round(pause, 1))
            self._release(h)
        except JobFailure as e:
            self._fail(h, e)
        except PERMANENT_ERRORS as e:
            cancel.set()
            self._fail(h, JobFailure("ApiRefused", e.message, permanent=True))
        except Exception as e:  # a bug or an unexpected error: let the job retry elsewhere
            cancel.set()
            self._fail(h, unexpected(h, e))
        finally:
            self.held.let_go(h)

    def cadence(self, job: TranscriptionJob) -> Cadence:
        """When the holder of `job` writes: heartbeats at the worker's share of the job's lease,
        checkpoints at the job's `checkpointSeconds` (else the worker's)."""
        lease = job.spec.lease_duration_seconds
        return Cadence(
            heartbeat=lease * self.settings.heartbeat_fraction,
            checkpoint=job.spec.checkpoint_seconds or self.settings.checkpoint_seconds,
            renew_deadline=lease * self.settings.renew_deadline_fraction,
        )

    def _check_stop(self, h: LeaseHolder) -> None:
        h.check()
        if self._stop_deadline is not None and self.clock.monotonic() > self._stop_deadline:
            raise Stopped()

    def _release(self, h: LeaseHolder) -> None:
        try:
            h.release()
            h.log.info("released")
            metrics.JOBS_FINISHED.labels(outcome="released").inc()
        except (LeaseLost, ApiError) as e:
            h.log.warning("release_failed", error=str(e)[:200])

    def _cache_unwritable(self, h: LeaseHolder, error: ModelCacheUnwritable) -> None:
        """Claim nothing more until the cache can be written (set before the release, so no
        slot claims the job again meanwhile), and give the job back."""
        job = h.known
        local_model: Callable[[TranscriptionJob], object] | None = getattr(
            self.engine, "local_model", None
        )
        self.cache.failed(error, (lambda: local_model(job)) if local_model else None)
        h.log.error("model_cache_unwritable", directory=str(error.directory), message=error.message)
        self._release(h)

    def _preload_cache_unwritable(self, error: ModelCacheUnwritable) -> None:
        """The start-up load found the cache unwritable: no job is claimed to be given back;
        the probe loads the worker's own model again."""
        preload: Callable[[], object] | None = getattr(self.engine, "preload", None)

        def retry() -> None:
            assert preload is not None
            preload()  # raises as the start-up load did
            self.preload.load_once()  # loaded: the registration's next renewal says so

        self.cache.failed(error, retry if preload else None)

    def _fail(self, h: LeaseHolder, error: JobFailure) -> None:
        try:
            job = h.fail(
                error.reason,
                error.message,
                permanent=error.permanent,
                backoff_base=self.settings.retry_base_seconds,
                backoff_cap=self.settings.retry_cap_seconds,
            )
        except (LeaseLost, ApiError) as e:
            h.log.warning("fail_not_recorded", error=str(e)[:200])
            return
        if error.reason in STORE_REFUSALS:
            self.store_probe.failed(error.reason)
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
