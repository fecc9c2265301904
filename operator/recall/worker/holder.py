"""The lease holder: one rented job, from the claim to complete, fail or release.

    holder = LeaseHolder.claim(store, job, worker)   # or the refused WriteResult
    with Heartbeater(holder, cadence):               # renews on the cadence (worker.heartbeat)
        holder.renew_if_older(cadence.fresh)         # before each engine call
        holder.checkpoint(progress)                  # chunks made durable: no write of its own
        holder.complete(result, chunks=n)            # or fail(error) / release()

Guarantees:
- Every write goes through `recall.fencing` with the job as last written (one request when
  nothing else changed it: the claim an update of the status, every later write a merge patch),
  one write at a time, each with a fence unique to it (`<token>/<n>`).
- Every renewal carries the latest checkpoint given (chunks durable in the store), so the status
  never names a chunk not stored; fail and release carry it too, for the next attempt to resume
  from. Writes fall due on the cadence (`recall.worker.cadence`), never once per chunk.
- The renew deadline and the write's one retry loop are `recall.worker.deadline`'s, on an
  injected clock (by default CLOCK_BOOTTIME, which counts on while the machine is suspended): the
  holder stops before the operator's reclaim could give the job to someone else, a slow answer
  never extends the lease, and a write still failing at the deadline is a lost lease, so the
  outcome is always known in time. A write whose answer was lost is settled by reading the job
  back (`fencing`): an applied complete is a success, never a lost lease.
- A refusal (the lease was reclaimed, re-issued, cancelled), or a `verify` read that shows the
  lease gone, marks it lost; from then on every write raises `LeaseLost` without reaching the
  API server. `lost` is an Event the work's stages wait on: a loss stops all of them at once.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

from recall.base import faults, log, metrics
from recall.base.clock import SYSTEM, Clock
from recall.base.log import short_token
from recall.fencing import Transition, WriteResult, fenced_write
from recall.kube import ApiError, JobApi, RawObject
from recall.protocol import lease
from recall.protocol.lease import Budget
from recall.resources import Progress, Result, TranscriptionJob
from recall.worker.deadline import LeaseLost, RenewDeadline


def budget_of(job: TranscriptionJob) -> Budget:
    return Budget(max_attempts=job.spec.max_attempts, max_releases=job.spec.max_releases)


class LeaseHolder:
    """One held lease. Thread-safe: the heartbeater and the work loop share it."""

    def __init__(
        self,
        store: JobApi,
        job: TranscriptionJob,
        worker: str,
        token: str,
        *,
        renew_deadline: float,
        sent_at: float,
        clock: Clock = SYSTEM,
    ) -> None:
        self.store = store
        self.known = job
        self.worker = worker
        self.token = token
        self.renew_deadline = renew_deadline
        self.clock = clock
        self.writes = 1  # the claim
        self._seq = 1  # the claim's fence suffix
        self._checkpointed_at = sent_at  # when the last write with a checkpoint was sent
        self.pending: Progress | None = None  # durable progress no write has carried yet
        progress = job.status.progress
        self._checkpoint_chunks = progress.chunks_done if progress else 0  # as last written
        self.wake = threading.Event()  # set when something for the heartbeater changed
        self.final = False  # a complete, fail or release was sent: the lease ends by our hand
        self._lock = threading.Lock()  # one write at a time
        self._pending_lock = threading.Lock()  # the pending checkpoint (the store stage sets it)
        self.log = log.get("worker").bind(
            job=job.name,
            namespace=job.namespace,
            worker=worker,
            attempt=job.status.attempts,
            token=short_token(token),
        )
        self.deadline = RenewDeadline(renew_deadline, sent_at, clock, self.log)
        self.lost = self.deadline.lost  # an Event the work's stages wait on

    # -- the claim ---------------------------------------------------------------------------

    @classmethod
    def claim(
        cls,
        store: JobApi,
        job: TranscriptionJob,
        worker: str,
        *,
        renew_deadline_fraction: float,
        clock: Clock = SYSTEM,
    ) -> LeaseHolder | WriteResult:
        """Claim `job` (as read at its resourceVersion) for `worker`: the holder, or the refused
        `WriteResult` (409: another worker won; or the job is not claimable). Raises
        `Unavailable` on a transient error (nothing was claimed, or an ambiguous claim could not
        be read back: then the lease, if it was taken, expires)."""
        token = lease.new_token()
        sent_at = clock.monotonic()
        result = fenced_write(
            store,
            job.namespace,
            job.name,
            lambda j: lease.claim(
                j.status,
                clock.now(),
                worker,
                token,
                lease_seconds=j.spec.lease_duration_seconds,
                budget=budget_of(j),
                suspended=j.suspended,
            ),
            action="claim",
            known=job,
            retry_on_conflict=False,
            # a claim that lands later would hold a lease already near its renew deadline
            timeout=job.spec.lease_duration_seconds * renew_deadline_fraction / 2,
        )
        if not result.applied or result.job is None:
            return result
        claimed = result.job
        holder = cls(
            store,
            claimed,
            worker,
            token,
            renew_deadline=claimed.spec.lease_duration_seconds * renew_deadline_fraction,
            sent_at=sent_at,
            clock=clock,
        )
        if result.settled_by_read:
            holder.log.info("write_settled_by_read", action="claim")
        holder.log.info("claimed", lease_seconds=claimed.spec.lease_duration_seconds)
        return holder

    # -- state -------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.known.name

    @property
    def attempt(self) -> int:
        return self.known.status.attempts

    def seconds_since_renewal(self) -> float:
        return self.deadline.since_renewal()

    def seconds_since_checkpoint(self) -> float:
        return self.clock.monotonic() - self._checkpointed_at

    def checkpoint(self, progress: Progress) -> None:
        """Record progress whose chunks are durable in the store; the next renewal (on the
        heartbeater's cadence) carries it. No write of its own, and never waits for one."""
        with self._pending_lock:
            self.pending = progress
        self.wake.set()

    def check(self) -> None:
        self.deadline.check()

    def verify(self, why: str) -> None:
        """On a hint that the lease is gone (`recall.worker.held`): read the job, mark the lease
        lost if not ours. Never writes; a failed read leaves it to the next write and deadline."""
        if self.lost.is_set() or self.final:
            return
        try:
            job = self.store.get_job(self.known.namespace, self.known.name, timeout=5.0)
        except ApiError as e:
            self.log.info("lease_check_failed", why=why, error=e.message[:200])
            return
        if job is None:
            self.deadline.mark_lost("Gone", f"{why}: the job was deleted")
            return
        refusal = lease.holder_refusal(job.status, self.worker, self.token)
        if refusal is not None and not self.final:
            # the reason the next write would be refused with (Terminal, NotLeased, ...)
            self.deadline.mark_lost(refusal.reason, f"{why}: {refusal.detail}")

    # -- the writes --------------------------------------------------------------------------

    def renew(self, progress: Progress | None = None) -> None:
        """The heartbeat, carrying the pending checkpoint (`progress`, when given, becomes it)."""
        if progress is not None:
            self.checkpoint(progress)
        self._write("renew", self._renewal, carries_checkpoint=True)

    def renew_if_older(self, seconds: float) -> None:
        """Renew unless a write sent in the last `seconds` succeeded; a renewal in flight is
        waited for, and counts if it succeeds. Returns only on a lease known ours, else raises
        `LeaseLost`."""
        self.check()
        if self.seconds_since_renewal() >= seconds:
            self._write("renew", self._renewal, carries_checkpoint=True, unless_within=seconds)
        self.check()

    def _renewal(self, seq: int, progress: Progress | None) -> Transition:
        return lambda job: lease.renew(
            job.status, self.clock.now(), self.worker, self.token, seq=seq, progress=progress
        )

    def complete(self, result: Result, *, chunks: int | None = None) -> TranscriptionJob:
        """Succeeded with `result`; `chunks` is the media's exact chunk count."""

        def make(seq: int, carried: Progress | None) -> Transition:
            return lambda job: lease.complete(
                job.status,
                self.clock.now(),
                self.worker,
                self.token,
                seq=seq,
                result=result,
                chunks=chunks,
            )

        return self._write("complete", make)

    def fail(
        self,
        reason: str,
        message: str,
        *,
        permanent: bool,
        backoff_base: float,
        backoff_cap: float,
    ) -> TranscriptionJob:
        """Queued with a backoff, or Failed; the pending checkpoint goes with it."""
        jitter = random.random()

        def make(seq: int, carried: Progress | None) -> Transition:
            return lambda job: lease.fail(
                job.status,
                self.clock.now(),
                self.worker,
                self.token,
                seq=seq,
                reason=reason,
                message=message,
                permanent=permanent,
                budget=budget_of(job),
                jitter=jitter,
                backoff_base=backoff_base,
                backoff_cap=backoff_cap,
                progress=carried,
            )

        return self._write("fail", make, carries_checkpoint=True)

    def release(self) -> TranscriptionJob:
        """Queued at once; the pending checkpoint goes with it."""

        def make(seq: int, carried: Progress | None) -> Transition:
            return lambda job: lease.release(
                job.status, self.clock.now(), self.worker, self.token, seq=seq, progress=carried
            )

        return self._write("release", make, carries_checkpoint=True)

    def _write(
        self,
        action: str,
        make: Callable[[int, Progress | None], Transition],
        *,
        carries_checkpoint: bool = False,
        unless_within: float | None = None,
    ) -> TranscriptionJob:
        """One fenced write, retried on transient errors until the deadline. `make` builds the
        transition under the write lock from the pending checkpoint read once there (`carried`,
        with `carries_checkpoint`): what is written is what is recorded as written. With
        `unless_within`, nothing is written if a write sent that recently succeeded meanwhile."""
        # Wait for a write in flight (the heartbeater's) only until the deadline.
        while not self._lock.acquire(timeout=0.1):
            self.check()
        try:
            if action == "renew" and self.final:
                return self.known  # a complete, fail or release was sent: nothing to keep alive
            if unless_within is not None and self.seconds_since_renewal() < unless_within:
                self.check()
                return self.known
            carried = self.pending if carries_checkpoint else None
            if action != "renew":
                self.final = True
            job = self._locked_write(action, lambda seq: make(seq, carried))
            if carried is not None:
                self._checkpointed(carried)
            return job
        finally:
            self._lock.release()

    def _checkpointed(self, carried: Progress) -> None:
        """`carried` is in the status now (the write that carried it succeeded)."""
        self._checkpointed_at = self.deadline.renewed_at
        with self._pending_lock:  # a newer checkpoint given meanwhile stays pending
            if self.pending is carried:
                self.pending = None
        metrics.CHECKPOINTS.inc()
        for chunks in range(self._checkpoint_chunks + 1, carried.chunks_done + 1):
            faults.hit("worker-after-chunk", chunk=chunks)
        self._checkpoint_chunks = max(self._checkpoint_chunks, carried.chunks_done)

    def _locked_write(self, action: str, make: Callable[[int], Transition]) -> TranscriptionJob:
        self._seq += 1
        transition = make(self._seq)
        started = self.clock.monotonic()
        result, sent_at = self.deadline.send(
            action, lambda sent, timeout: self._fenced(transition, action, sent, timeout)
        )
        self.writes += 1
        metrics.LEASE_WRITES.labels(action=action).inc()
        if action == "renew":
            metrics.HEARTBEAT_LATENCY.observe(self.clock.monotonic() - started)
        if not result.applied or result.job is None:
            assert result.refusal is not None
            # Logged even if the lease is already known lost: this is the API server's fence.
            self.log.info(
                "write_refused",
                action=action,
                reason=result.refusal.reason,
                conflicts=result.conflicts,
            )
            self.deadline.mark_lost(
                result.refusal.reason,
                result.refusal.detail,
                action=action,
                conflicts=result.conflicts,
            )
            raise LeaseLost(result.refusal.reason, result.refusal.detail)
        if result.settled_by_read:
            self.log.info("write_settled_by_read", action=action)
        self.known = result.job
        self.deadline.renewed_at = sent_at
        self.wake.set()
        if action == "renew" and self.lost.is_set():
            # The renew deadline passed while this write was in flight: a loss is final.
            raise LeaseLost(self.deadline.reason)
        return result.job

    def _fenced(
        self, transition: Transition, action: str, sent: list[RawObject], timeout: float
    ) -> WriteResult:
        """One try of a holder's write: `sent` are earlier tries' patches maybe applied."""
        return fenced_write(
            self.store,
            self.known.namespace,
            self.known.name,
            transition,
            action=action,
            known=self.known,
            maybe_applied=sent,
            timeout=timeout,
            retry=None,
        )
