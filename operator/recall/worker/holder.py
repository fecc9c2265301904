"""The lease holder: one rented job, from the claim to complete, fail or release.

    holder = LeaseHolder.claim(store, job, worker)   # None: someone else won
    with Heartbeater(holder, interval):              # renews while work blocks
        holder.renew(progress)                       # before each engine call, after each chunk
        holder.complete(result)                      # or fail(error) / release()

Guarantees:
- Every write goes through `recall.fencing` with the job as last written (one PATCH when nothing
  else changed it), one write at a time, each with a fence unique to it (`<token>/<n>`).
- The renew deadline (a share of the lease, shorter than it) counts from when the last
  successful write was SENT, on an injected monotonic clock (by default CLOCK_BOOTTIME, which
  keeps counting while the machine is suspended). Once it passes without a successful write,
  the lease counts as lost: the holder stops before the operator's reclaim could give the job to
  someone else. A slow answer therefore never extends the lease in the holder's eyes.
- Transient API errors are retried until the renew deadline, then reported as a lost lease:
  the outcome is always known in time. A write whose answer was lost is settled by reading the
  job back (`fencing`): an applied complete is a success, never a lost lease.
- A refusal (the lease was reclaimed, re-issued, cancelled) marks the lease lost; from then on
  every write raises `LeaseLost` without reaching the API server.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

from recall.base import faults, log, metrics
from recall.base.clock import Monotonic, WallClock, boottime, utcnow
from recall.base.log import short_token
from recall.fencing import Transition, Unsettled, WriteResult, fenced_write
from recall.kube import PERMANENT_ERRORS, JobStore, RawObject, Unavailable
from recall.protocol import lease
from recall.protocol.lease import Budget
from recall.resources import Progress, Result, TranscriptionJob


def budget_of(job: TranscriptionJob) -> Budget:
    return Budget(max_attempts=job.spec.max_attempts, max_releases=job.spec.max_releases)


class LeaseLost(Exception):
    """The lease is no longer ours: refused by a fenced write, or the renew deadline passed."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


class LeaseHolder:
    """One held lease. Thread-safe: the heartbeater and the work loop share it."""

    def __init__(
        self,
        store: JobStore,
        job: TranscriptionJob,
        worker: str,
        token: str,
        *,
        renew_deadline: float,
        sent_at: float,
        clock: Monotonic = boottime,
        now: WallClock = utcnow,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.store = store
        self.known = job
        self.worker = worker
        self.token = token
        self.renew_deadline = renew_deadline
        self.clock = clock
        self.now = now
        self.sleep = sleep
        self.lost = threading.Event()
        self.lost_reason = ""
        self.writes = 1  # the claim
        self._seq = 1  # the claim's fence suffix
        self._renewed_at = sent_at  # when the last successful write was sent
        self._lock = threading.Lock()
        self.log = log.get("worker").bind(
            job=job.name,
            namespace=job.namespace,
            worker=worker,
            attempt=job.status.attempts,
            token=short_token(token),
        )

    # -- the claim ---------------------------------------------------------------------------

    @classmethod
    def claim(
        cls,
        store: JobStore,
        job: TranscriptionJob,
        worker: str,
        *,
        renew_deadline_fraction: float,
        clock: Monotonic = boottime,
        now: WallClock = utcnow,
    ) -> LeaseHolder | WriteResult:
        """Claim `job` (as read at its resourceVersion) for `worker`.

        Returns the holder, or the refused `WriteResult` (409: another worker won; or the job is
        not claimable). Raises `Unavailable` on a transient error (nothing was claimed, or an
        ambiguous claim could not be read back: then the lease, if it was taken, expires).
        """
        token = lease.new_token()
        sent_at = clock()
        result = fenced_write(
            store,
            job.namespace,
            job.name,
            lambda j: lease.claim(
                j.status,
                now(),
                worker,
                token,
                lease_seconds=j.spec.lease_duration_seconds,
                budget=budget_of(j),
                suspended=j.suspended,
            ),
            action="claim",
            known=job,
            retry_on_conflict=False,
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
            now=now,
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
        return self.clock() - self._renewed_at

    def check(self) -> None:
        """Raise `LeaseLost` if the lease is lost or the renew deadline has passed. Lock-free."""
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

    # -- the writes --------------------------------------------------------------------------

    def renew(self, progress: Progress | None = None) -> None:
        """The heartbeat; with `progress`, also the checkpoint."""
        started = time.monotonic()
        self._write(
            "renew",
            lambda seq: (
                lambda job: lease.renew(
                    job.status, self.now(), self.worker, self.token, seq=seq, progress=progress
                )
            ),
        )
        metrics.HEARTBEAT_LATENCY.observe(time.monotonic() - started)

    def renew_if_older(self, seconds: float, progress: Progress | None = None) -> None:
        """Renew unless a renewal succeeded in the last `seconds` (the claim, or the one after
        the previous chunk, already proved the lease is ours); used before each engine call."""
        if self.seconds_since_renewal() >= seconds:
            self.renew(progress)
        else:
            self.check()

    def complete(self, result: Result) -> TranscriptionJob:
        return self._write(
            "complete",
            lambda seq: (
                lambda job: lease.complete(
                    job.status, self.now(), self.worker, self.token, seq=seq, result=result
                )
            ),
        )

    def fail(
        self,
        reason: str,
        message: str,
        *,
        permanent: bool,
        backoff_base: float,
        backoff_cap: float,
    ) -> TranscriptionJob:
        jitter = random.random()
        return self._write(
            "fail",
            lambda seq: (
                lambda job: lease.fail(
                    job.status,
                    self.now(),
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
                )
            ),
        )

    def release(self) -> TranscriptionJob:
        return self._write(
            "release",
            lambda seq: (
                lambda job: lease.release(job.status, self.now(), self.worker, self.token, seq=seq)
            ),
        )

    def _write(self, action: str, make: Callable[[int], Transition]) -> TranscriptionJob:
        """One fenced write of the holder, retried on transient errors until the deadline."""
        # Wait for a write in flight (the heartbeater's) only until the deadline.
        while not self._lock.acquire(timeout=0.1):
            self.check()
        try:
            return self._locked_write(action, make)
        finally:
            self._lock.release()

    def _locked_write(self, action: str, make: Callable[[int], Transition]) -> TranscriptionJob:
        self.check()
        faults.pause("worker-pause-before-write", action=action)
        self._seq += 1
        transition = make(self._seq)
        pending: list[RawObject] = []
        while True:
            sent_at = self.clock()
            remaining = self.renew_deadline - (sent_at - self._renewed_at)
            try:
                result = fenced_write(
                    self.store,
                    self.known.namespace,
                    self.known.name,
                    transition,
                    action=action,
                    known=self.known,
                    maybe_applied=pending,
                    # a lost answer costs a second request (reading back): both fit
                    timeout=max(0.2, remaining / 2),
                )
                break
            except Unsettled as e:
                pending = e.patches
                self._retry_pause(action, e, remaining)
            except Unavailable as e:
                self._retry_pause(action, e, remaining)
            except PERMANENT_ERRORS as e:
                # The API server refused the write itself (a CEL rule, a policy): the lease
                # cannot be used any more.
                self._mark_lost("Refused", e.message, action=action)
                raise LeaseLost("Refused", e.message) from e
        self.writes += 1
        if not result.applied or result.job is None:
            assert result.refusal is not None
            # Logged even when the lease was already known lost (a thread that checked the
            # renew deadline first): this is the API server's fence answering.
            self.log.info(
                "write_refused",
                action=action,
                reason=result.refusal.reason,
                conflicts=result.conflicts,
            )
            self._mark_lost(
                result.refusal.reason,
                result.refusal.detail,
                action=action,
                conflicts=result.conflicts,
            )
            raise LeaseLost(result.refusal.reason, result.refusal.detail)
        if result.settled_by_read:
            self.log.info("write_settled_by_read", action=action)
        self.known = result.job
        self._renewed_at = sent_at
        return result.job

    def _retry_pause(self, action: str, error: Unavailable, remaining: float) -> None:
        self.log.warning("write_error", action=action, error=error.message[:200])
        self.check()
        self.sleep(min(0.5, max(0.05, remaining / 4)))


class Heartbeater:
    """A named background thread renewing the lease while work blocks.

    It sleeps until `interval` after the last successful write (by anyone), so it adds no
    writes while the work loop renews after each chunk. After a failed write it tries again
    every `interval / 4`. It stops on exit of the `with` block, when the lease is lost, or at
    the renew deadline.
    """

    def __init__(self, holder: LeaseHolder, interval: float) -> None:
        self.holder = holder
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"heartbeat-{holder.name}", daemon=True
        )

    def __enter__(self) -> Heartbeater:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        h = self.holder
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
            except Exception as e:  # a bug or an unexpected error: keep trying until the deadline
                h.log.warning("renew_error", error=str(e)[:200])
                try:
                    h.check()
                except LeaseLost:
                    return
                wait = self.interval / 4
