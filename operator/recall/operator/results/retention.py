"""Retention, as Kubernetes Jobs have it: a finished Batch's jobs deleted after its TTL.

`expire_finished(...)` deletes, with one request per Batch, the jobs of every Batch whose
`spec.ttlSecondsAfterFinished` has passed since its `status.completedAt` (written when the last
completed item was published) and posts a `JobsDeleted` Event. The Batch's status is frozen
once Complete, so it shows the same afterwards; the results stay in the store and the Batch's
results index (`recall transcript BATCH/KEY`); published outputs are never touched. A failed
delete is logged and retried at the next tick.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from recall.base import log
from recall.kube import Api, ApiError, ObjectRef
from recall.operator.reconcile.cache import JobCache
from recall.operator.reconcile.record import BatchKey
from recall.operator.reconcile.report import PostEvent
from recall.resources import LABEL_BATCH, Batch, label_value

_log = log.get("operator")


def expired(batch: Batch, now: dt.datetime) -> bool:
    """Whether `batch` is Complete and its TTL has passed at `now` (pure)."""
    ttl = batch.spec.ttl_seconds_after_finished
    done = batch.status.completed_at
    if ttl is None or done is None or not batch.status.complete:
        return False
    return (now - done).total_seconds() >= ttl


def never(_batch: Batch) -> bool:
    return False


def expire_finished(
    store: Api,
    cache: JobCache,
    event: PostEvent,
    batches: dict[BatchKey, Batch],
    now: dt.datetime,
    held: Callable[[Batch], bool] = never,
) -> int:
    """Delete the jobs of every expired Batch that still has some and that `held` does not
    hold (its events not settled yet: `recall.operator.notify.state.holds`); how many."""
    count = 0
    for key, batch in batches.items():
        if not expired(batch, now) or not cache.has_batch(key) or held(batch):
            continue
        try:
            store.delete_jobs(batch.namespace, f"{LABEL_BATCH}={label_value(batch.name)}")
        except ApiError as e:
            _log.warning("ttl_delete_failed", batch=batch.name, error=e.message[:200])
            continue
        count += 1
        ttl = batch.spec.ttl_seconds_after_finished
        _log.info("batch_jobs_expired", batch=batch.name, namespace=batch.namespace, ttl=ttl)
        event(
            ObjectRef("Batch", batch.namespace, batch.name, batch.metadata.uid or ""),
            "Normal",
            "JobsDeleted",
            f"ttlSecondsAfterFinished ({ttl} s) passed: the finished jobs are deleted; the "
            "results stay in the store (recall transcript BATCH/KEY)",
        )
    return count
