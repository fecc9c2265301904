"""The renew deadline of one held lease: when the lease counts as lost, and the one retry loop
of its writes, which the deadline bounds. `recall.worker.holder` owns one per lease.

- The deadline (a share of the lease, shorter than it) counts from when the last successful
  write was SENT (`renewed_at`), on the holder's monotonic clock. Once it passes without a
  successful write, `check` marks the lease lost and raises `LeaseLost`.
- A loss is final and counted once, however many threads notice it (`mark_lost`).
- `send` tries one write until it gets an answer, never sending past the deadline: an ambiguous
  outcome again with the patches that may have been applied (the fenced write settles it by
  reading), a transient error or an RBAC refusal after a pause, a 429 no sooner than its
  Retry-After. Any other refusal of the API server marks the lease lost.

Not guaranteed: that a write sent before the deadline lands before it (the API server's fence
refuses a late one).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from recall.base import faults, metrics
from recall.base.backoff import Backoff
from recall.base.clock import Clock
from recall.fencing import Unsettled, WriteResult
from recall.kube import PERMANENT_ERRORS, ApiError, Forbidden, RawObject, Unavailable, retry_pause

# Between tries of a lease write: 0.5 s, or a quarter of what is left to the renew deadline if
# less (a try is one cheap request; the deadline bounds them); no sooner than a Retry-After.
WRITE_RETRY = Backoff(initial=0.5, cap=0.5)


class LeaseLost(Exception):
    """The lease is no longer ours: refused by a fenced write, or the renew deadline passed."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


class RenewDeadline:
    """One lease's renew deadline and its loss. Thread-safe: `check` is lock-free."""

    def __init__(self, seconds: float, sent_at: float, clock: Clock, log: Any) -> None:
        self.seconds = seconds
        self.clock = clock
        self.log = log  # the holder's, bound to the job and the lease
        self.renewed_at = sent_at  # when the last successful write was sent
        self.lost = threading.Event()
        self.reason = ""
        self._lock = threading.Lock()

    def since_renewal(self) -> float:
        return self.clock.monotonic() - self.renewed_at

    def check(self) -> None:
        """Raise `LeaseLost` if the lease is lost or the renew deadline has passed. Lock-free."""
        if not self.lost.is_set() and self.since_renewal() > self.seconds:
            self.mark_lost("RenewDeadline", f"no renewal for {self.since_renewal():.1f} s")
        if self.lost.is_set():
            raise LeaseLost(self.reason)

    def mark_lost(self, reason: str, detail: str, **context: object) -> None:
        with self._lock:  # several threads check the deadline: one loss, counted once
            if self.lost.is_set():
                return
            self.reason = reason
            self.lost.set()
        metrics.LEASES_LOST.labels(reason=reason).inc()
        self.log.warning("lease_lost", reason=reason, detail=detail, **context)

    def send(
        self, action: str, write: Callable[[list[RawObject], float], WriteResult]
    ) -> tuple[WriteResult, float]:
        """`write(maybe_applied, timeout)` tried until it answers, within the deadline; returns
        the answer and when the earliest try that may have been applied was sent (an earlier
        try whose answer was lost may be the write that landed, and the operator judges the
        lease from it). Raises `LeaseLost`."""
        pending: list[RawObject] = []
        first_sent: float | None = None  # the first try whose outcome is unknown
        retries = -1
        # The one retry loop of this write: the fenced write under it decides again on a 409
        # and retries nothing, and the API client does not retry a 429 (retry=None).
        while True:
            retries += 1
            self.check()  # never send past the renew deadline, also after a retry's pause
            # Frozen here, past its check: the API server's fence refuses the late write.
            faults.pause("worker-pause-before-write", action=action)
            sent_at = self.clock.monotonic()
            remaining = self.seconds - (sent_at - self.renewed_at)
            try:
                # a lost answer costs a second request (reading back): both fit
                result = write(pending, max(0.2, remaining / 2))
                return result, sent_at if first_sent is None else first_sent
            except Unsettled as e:
                pending = e.patches
                first_sent = sent_at if first_sent is None else first_sent
                self._pause(action, e, remaining, retries)
            except Unavailable as e:
                self._pause(action, e, remaining, retries)
            except PERMANENT_ERRORS as e:
                if isinstance(e, Forbidden) and e.by_authorizer:
                    # RBAC said no: a new kube-apiserver does until its caches fill. A real lack
                    # of permission reaches the renew deadline with this message in the log.
                    self._pause(action, e, remaining, retries)
                    continue
                # The write itself was refused (a CEL rule, a policy): the lease is unusable.
                self.mark_lost("Refused", e.message, action=action)
                raise LeaseLost("Refused", e.message) from e

    def _pause(self, action: str, error: ApiError, remaining: float, retry: int) -> None:
        self.log.warning(
            "write_error", action=action, error=error.message[:200], status=error.status
        )
        self.check()
        # A Retry-After past the renew deadline is not waited out: the lease ends at the deadline.
        pause = retry_pause(error, min(WRITE_RETRY.delay(retry), max(0.05, remaining / 4)))
        self.clock.sleep(min(pause, max(0.05, self.seconds - self.since_renewal())))
