"""The garbage of the results store: what no accepted result references, deleted (invariant 8).

    collector = Collector(store, bucket, cache, batches=...)
    collector.collect()      # the jobs that changed so, deleted jobs, deleted Batches
    collector.sweep()        # the whole store against the jobs and Batches that exist

- A job's objects once it ended or took another attempt (`transcripts.garbage`: the job as the
  cache has it, read BEFORE the listing, so the listing is never older than the view).
- Everything of a deleted job: its key holds its UID, so a namesake is never hit.
- A deleted Batch's results index (its published outputs are the user's and stay).
- `sweep`: everything under scratch/ and index/ against the jobs and Batches that exist; an
  object of a job or Batch the cache does not know is deleted only after a read from the API
  server confirms that none of that name and UID exists. It also removes what a zombie wrote
  after its job's objects were collected.
Nothing here deletes what a job's status references, nor any output. Store errors propagate
(`recall.bucket.errors`); the caller retries at its next pass.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable

from recall.base import log, metrics
from recall.bucket import Bucket, StoreError
from recall.kube import Api
from recall.operator.reconcile.cache import JobCache
from recall.operator.reconcile.record import BatchKey, JobRecord
from recall.resources import Batch
from recall.transcripts import JobView, garbage, job_prefix, parse_scratch
from recall.transcripts.layout import INDEX, SCRATCH

_log = log.get("results")
CLEANUP_PER_PASS = 64


class Collector:
    """Deletes what nothing references; see the module doc."""

    def __init__(
        self,
        store: Api,
        bucket: Bucket,
        cache: JobCache,
        *,
        batches: Callable[[], dict[BatchKey, Batch]],
    ) -> None:
        self.store = store
        self.bucket = bucket
        self.cache = cache
        self.batches = batches
        self._forgotten: set[tuple[str, str, str]] = set()  # Batches deleted: (ns, name, uid)
        self._lock = threading.Lock()

    def forget_batch(self, namespace: str, name: str, uid: str) -> None:
        with self._lock:
            self._forgotten.add((namespace, name, uid))

    def collect(self) -> int:
        """Delete the garbage of the jobs that changed so, of deleted jobs and Batches."""
        deleted = 0
        for namespace, name, uid in self.cache.take_removed():
            deleted += self._delete_prefix(job_prefix(namespace, name, uid))
        with self._lock:
            forgotten, self._forgotten = self._forgotten, set()
        for namespace, name, uid in sorted(forgotten):
            deleted += self._delete_prefix(f"{INDEX}/{namespace}/{name}/{uid}/")
        for key in self.cache.take_cleanup(CLEANUP_PER_PASS):
            record = self.cache.get(key)  # the view first, then the listing
            if record is None or not record.uid:
                continue
            try:
                deleted += self._collect_job(view_of(record))
            except StoreError:
                self.cache.cleanup.add(key)
                raise
        return deleted

    def _collect_job(self, view: JobView) -> int:
        keys = [o.key for o in self.bucket.list(job_prefix(view.namespace, view.name, view.uid))]
        metrics.STORE_OPERATIONS.labels(operation="list").inc()
        doomed = garbage(view, keys)
        if doomed:
            self.bucket.delete(doomed)
            metrics.STORE_OPERATIONS.labels(operation="delete").inc(len(doomed))
            _log.info(
                "garbage_deleted", job=view.name, namespace=view.namespace, objects=len(doomed)
            )
        return len(doomed)

    def _delete_prefix(self, prefix: str) -> int:
        keys = [o.key for o in self.bucket.list(prefix)]
        metrics.STORE_OPERATIONS.labels(operation="list").inc()
        if keys:
            self.bucket.delete(keys)
            metrics.STORE_OPERATIONS.labels(operation="delete").inc(len(keys))
            _log.info("prefix_deleted", prefix=prefix, objects=len(keys))
        return len(keys)

    def sweep(self) -> int:
        """Sweep scratch/ and index/ (see the module doc); returns the objects deleted."""
        by_job: defaultdict[tuple[str, str, str], list[str]] = defaultdict(list)
        for info in self.bucket.list(f"{SCRATCH}/"):
            key = parse_scratch(info.key)
            if key is not None:
                by_job[(key.namespace, key.job, key.uid)].append(info.key)
        deleted = 0
        for (namespace, name, uid), keys in sorted(by_job.items()):
            record = self.cache.get((namespace, name))
            if record is not None and record.uid == uid:
                doomed = garbage(view_of(record), keys)
            else:
                job = self.store.get_job(namespace, name)  # all of it, once none has that UID
                if job is not None and job.metadata.uid == uid:
                    continue
                doomed = keys
            if doomed:
                self.bucket.delete(doomed)
                deleted += len(doomed)
        parts = (info.key.split("/") for info in self.bucket.list(f"{INDEX}/"))
        batches = {(p[1], p[2], p[3]) for p in parts if len(p) == 5}
        for namespace, name, uid in sorted(batches):
            known = self.batches().get((namespace, name))
            if known is not None and known.metadata.uid == uid:
                continue
            current = self.store.get_batch(namespace, name)
            if current is None or current.metadata.uid != uid:
                deleted += self._delete_prefix(f"{INDEX}/{namespace}/{name}/{uid}/")
        if deleted:
            _log.info("swept", objects=deleted)
        return deleted


def view_of(record: JobRecord) -> JobView:
    return JobView(
        namespace=record.namespace,
        name=record.name,
        uid=record.uid,
        phase=record.phase,
        attempts=record.attempts,
        token=record.lease.token if record.lease else None,
        parts=record.parts,
        result=record.result,
    )
