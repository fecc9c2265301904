"""The operator's view of every TranscriptionJob: compact records kept current by an informer.

`JobCache`, the informer's consumer, for each job event keeps its `JobRecord` by key and by
Batch, observes its lease and backoff on the operator's monotonic clock (the one place that
does), marks its Batch item changed (`Marks`: the next projection writes it and counts no heal
there), and wakes the controller.

Thread-safe: the informer thread writes, the controller thread reads snapshots.
"""

from __future__ import annotations

import itertools
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from recall.base.clock import Clock
from recall.kube import RawObject
from recall.operator.reconcile.marks import Marks
from recall.operator.reconcile.record import BatchKey, JobRecord
from recall.protocol.observer import JobKey, LeaseObserver, Observation
from recall.resources import Batch, Phase


@dataclass(frozen=True)
class BackoffObservation:
    """When the observer first saw a job wait `seconds` in backoff (after failure `failures`)."""

    failures: int
    seconds: float
    observed_at: float

    def over(self, now_mono: float) -> bool:
        return now_mono >= self.observed_at + self.seconds


def needs_cleanup(old: JobRecord | None, new: JobRecord) -> bool:
    """Did this change leave objects in the results store that nothing may reference any more?
    A job that ended (a Succeeded one's chunks go too: its transcript holds them), and a job
    that took another attempt (a zombie's, or an abandoned one's, leftovers)."""
    if old is None:
        return new.phase.terminal and not new.published  # first seen (a restart): look once
    if new.phase.terminal and not old.phase.terminal:
        return True
    return new.attempts > old.attempts and new.attempts > 1


def needs_watching(record: JobRecord) -> bool:
    if record.phase is Phase.LEASED:
        return True
    if record.phase is not Phase.QUEUED:
        return False
    return record.backoff_seconds is not None or record.attempts_left <= 0


class KnownBatches:
    """The Batches as kopf delivered them, by key: written by the controller, read by the
    results loop (which Batch an item or a result belongs to). Thread-safe."""

    def __init__(self) -> None:
        self._batches: dict[BatchKey, Batch] = {}
        self._lock = threading.Lock()

    def put(self, batch: Batch) -> Batch | None:
        """Keep `batch`; the copy it replaces, if any."""
        with self._lock:
            old = self._batches.get(batch.key)
            self._batches[batch.key] = batch
            return old

    def pop(self, key: BatchKey) -> None:
        with self._lock:
            self._batches.pop(key, None)

    def __bool__(self) -> bool:
        with self._lock:
            return bool(self._batches)

    def snapshot(self) -> dict[BatchKey, Batch]:
        with self._lock:
            return dict(self._batches)


class JobCache:
    def __init__(self, clock: Clock, wake: Callable[[], None] = lambda: None) -> None:
        self.clock = clock
        self.wake = wake
        self.leases = LeaseObserver()
        self.marks = Marks()
        self.synced = threading.Event()
        self._lock = threading.RLock()
        self._jobs: dict[JobKey, JobRecord] = {}
        self._by_batch: defaultdict[BatchKey, dict[JobKey, JobRecord]] = defaultdict(dict)
        self._backoffs: dict[JobKey, BackoffObservation] = {}
        self._watched: set[JobKey] = set()  # leased, in backoff, or out of attempts
        self.phase_counts: dict[Phase, int] = dict.fromkeys(Phase, 0)
        # Jobs that may have left objects nothing references any more (`needs_cleanup`).
        self.cleanup: set[JobKey] = set()
        # Succeeded jobs whose result is not published yet (outputs, the Batch's index).
        self.publish: set[JobKey] = set()
        # Jobs deleted since the results store last heard of it: (namespace, name, uid).
        self.removed: set[tuple[str, str, str]] = set()
        # Called with (old, new) on every change, under the cache's lock.
        self.listeners: list[Callable[[JobRecord | None, JobRecord | None], None]] = []

    # -- the informer's side -----------------------------------------------------------------

    def relisted(self, items: Iterator[RawObject]) -> None:
        # A job first seen in a list after the first appeared while the watch was away: what
        # happened to it meanwhile is unknown, so its item may have moved (not a heal).
        again = self.synced.is_set()
        seen: set[JobKey] = set()
        for raw in items:
            record = JobRecord.from_raw(raw)
            seen.add(record.key)
            self._put(record, unseen_moved=again)
        with self._lock:
            for key in [k for k in self._jobs if k not in seen]:
                self._remove(key)
        self.synced.set()
        self.wake()

    def changed(self, type_: str, obj: RawObject) -> None:
        record = JobRecord.from_raw(obj)
        if type_ == "DELETED":
            with self._lock:
                self._remove(record.key)
        else:
            self._put(record)
        self.wake()

    def _put(self, record: JobRecord, *, unseen_moved: bool = False) -> None:
        now = self.clock.monotonic()
        with self._lock:
            old = self._jobs.get(record.key)
            if old is not None and old.batch_key and old.batch != record.batch:
                self._by_batch[old.batch_key].pop(record.key, None)
            self._jobs[record.key] = record
            if old is not None:
                self.phase_counts[old.phase] -= 1
            self.phase_counts[record.phase] += 1
            if record.batch_key:
                self._by_batch[record.batch_key][record.key] = record
            self.leases.observe(record.key, record.lease, now)
            self._observe_backoff(record, now)
            if needs_watching(record):
                self._watched.add(record.key)
            else:
                self._watched.discard(record.key)
            # A job seen for the first time (first list, or created since) is no change since
            # the last projection: a status that disagrees with it is a heal (after a restart).
            if old is None:
                moved = changed = unseen_moved
            else:
                moved = old.phase != record.phase or old.attempts != record.attempts
                changed = (
                    moved
                    or old.expired_leases != record.expired_leases
                    or old.failures != record.failures
                    or old.published != record.published
                )
            if changed and record.batch_key and record.index is not None:
                self.marks.mark(record.batch_key, record.index, moved=moved)
            if needs_cleanup(old, record):
                self.cleanup.add(record.key)
            if record.to_publish:
                self.publish.add(record.key)
            else:
                self.publish.discard(record.key)
            for listener in self.listeners:
                listener(old, record)

    def _remove(self, key: JobKey) -> None:
        record = self._jobs.pop(key, None)
        self.cleanup.discard(key)
        self.publish.discard(key)
        if record is not None and record.uid:
            self.removed.add((record.namespace, record.name, record.uid))
        if record is not None:
            self.phase_counts[record.phase] -= 1
        self._watched.discard(key)
        self.leases.forget(key)
        self._backoffs.pop(key, None)
        if record is not None:
            for listener in self.listeners:
                listener(record, None)
        if record is not None and record.batch_key:
            self._by_batch[record.batch_key].pop(key, None)
            if not self._by_batch[record.batch_key]:
                del self._by_batch[record.batch_key]
            if record.index is not None:
                self.marks.mark(record.batch_key, record.index)

    def _observe_backoff(self, record: JobRecord, now: float) -> None:
        if record.backoff_seconds is None or record.phase is not Phase.QUEUED:
            self._backoffs.pop(record.key, None)
            return
        seen = self._backoffs.get(record.key)
        if seen is None or seen.failures != record.failures:
            self._backoffs[record.key] = BackoffObservation(
                record.failures, float(record.backoff_seconds), now
            )

    # -- the controller's side ---------------------------------------------------------------

    def batch_jobs(self, batch: BatchKey) -> dict[JobKey, JobRecord]:
        with self._lock:
            return dict(self._by_batch.get(batch, {}))

    def has_batch(self, batch: BatchKey) -> bool:
        with self._lock:
            return bool(self._by_batch.get(batch))

    def get(self, key: JobKey) -> JobRecord | None:
        with self._lock:
            return self._jobs.get(key)

    def take_cleanup(self, limit: int) -> list[JobKey]:
        with self._lock:
            chosen = sorted(self.cleanup)[:limit]
            self.cleanup.difference_update(chosen)
            return chosen

    def take_publish(self, limit: int, skip: set[JobKey]) -> list[JobKey]:
        """Up to `limit` jobs to publish, none of `skip` (in flight or waiting out a retry);
        they stay in the set until their publish record is seen."""
        with self._lock:
            return list(itertools.islice((k for k in self.publish if k not in skip), limit))

    def take_removed(self) -> list[tuple[str, str, str]]:
        with self._lock:
            chosen = sorted(self.removed)
            self.removed.clear()
            return chosen

    def watched(self) -> list[JobRecord]:
        """Jobs the reclaim loop looks at every tick: leased, in backoff, or out of attempts."""
        with self._lock:
            return [self._jobs[k] for k in self._watched]

    def observations(self) -> dict[JobKey, Observation]:
        return self.leases.snapshot()

    def backoffs(self) -> dict[JobKey, BackoffObservation]:
        with self._lock:
            return dict(self._backoffs)

    def all(self) -> list[JobRecord]:
        with self._lock:
            return list(self._jobs.values())
