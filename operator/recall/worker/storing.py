"""An attempt's calls to the results store, retried on transient errors while the lease holds.

A store that is down or slow delays the job, never the worker: `store_call` retries
`StoreUnavailable` (`STORE_RETRY`) while the lease holds, and until `check_stop` raises
(`LeaseLost`, `Stopped`) or, in a pipeline stage, until the stage is aborted (`Aborted`). A
refusal (access denied, a missing bucket, a bad URL, an object that exists with other bytes) is
never retried: it is a permanent `JobFailure` with the store's reason.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from recall.base import metrics
from recall.base.backoff import Backoff
from recall.bucket import StoreError, StoreUnavailable
from recall.resources.errors import JobFailure
from recall.worker.holder import LeaseHolder
from recall.worker.pipeline import Stopwatch

T = TypeVar("T")
STORE_RETRY = Backoff(initial=0.1, cap=5.0)  # a results-store call the store did not answer


class Aborted(Exception):
    """The store stage was aborted while it retried: it ends without writing."""


def store_call(
    h: LeaseHolder,
    watch: Stopwatch,
    what: str,
    fn: Callable[[], T],
    check_stop: Callable[[LeaseHolder], None],
    *,
    aborted: threading.Event | None = None,
) -> T:
    """`fn()` under the module's contract; `what` says in a refusal's message what was refused."""
    retries = 0
    while True:
        try:
            return watch.timed("store", fn)
        except StoreUnavailable as e:
            h.log.warning("store_error", error=e.message[:300])
            metrics.STORE_ERRORS.labels(reason=e.reason).inc()
            h.check()
            pause = STORE_RETRY.delay(retries)
            retries += 1
            if aborted is None:
                check_stop(h)
                h.clock.sleep(pause)
            elif h.clock.wait(aborted, pause):
                raise Aborted() from None
        except StoreError as e:
            metrics.STORE_ERRORS.labels(reason=e.reason).inc()
            raise JobFailure(
                e.reason,
                f"the results store refused {what} (not retried): {e.message}",
                permanent=True,
            ) from None
