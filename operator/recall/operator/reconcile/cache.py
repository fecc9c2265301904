"""The operator's view of every TranscriptionJob: compact records kept current by an informer.

`JobCache` is the informer's consumer. For each job event it
- keeps a `JobRecord` (a few hundred bytes instead of the whole object: the operator holds
  100,000 of them), indexed by key and by Batch;
- observes the job's lease and backoff on the operator's monotonic clock (`Observer`), the one
  place where that happens;
- marks the job's Batch item as changed (`Marks`), so the next projection writes it and does not
  count it as a heal;
- wakes the controller.

Thread-safe: the informer thread writes, the controller thread reads snapshots.
"""

from __future__ import annotations

import datetime as dt
import itertools
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from recall.base.clock import Clock
from recall.engines.languages import multilingual_asks
from recall.kube import RawObject
from recall.protocol.observer import JobKey, LeaseObserver, Observation
from recall.resources import DEFAULT_POOL, LABEL_INDEX, LABEL_SUSPENDED, Batch, Lease, Part, Phase

BatchKey = tuple[str, str]  # (namespace, batch name)


def _time(value: Any) -> dt.datetime | None:
    if not value:
        return None
    return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def _audio_seconds(result: Any) -> float | None:
    if not isinstance(result, dict) or result.get("durationSeconds") is None:
        return None
    return float(result["durationSeconds"]) * int(result.get("channels") or 1)


def _notified(record: Any) -> str | None:
    if not isinstance(record, dict) or not record.get("time"):
        return None
    return "givenUp" if record.get("givenUp") else "delivered"


@dataclass(slots=True)
class JobRecord:
    """What the operator needs of one job to plan: identity, phase, counters, lease, errors."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    batch: str | None
    item: str | None
    index: int | None
    phase: Phase
    attempts: int
    expired_leases: int
    failures: int
    releases: int
    max_attempts: int
    max_releases: int
    lease: Lease | None
    backoff_seconds: float | None
    offer: str | None
    priority: int
    created: dt.datetime | None
    suspended: bool
    engine: str | None
    pool: str  # the worker pool it belongs to (spec.pool, else the default pool)
    started_at: dt.datetime | None
    completed_at: dt.datetime | None
    error_reason: str | None
    error_message: str | None
    result: str | None  # status.result.transcript: the accepted transcript's key
    parts: tuple[Part, ...]  # the checkpoint: where its chunks are in the results store
    published: bool
    output: bool  # spec.output asks for outputs
    notified: str | None = None  # its event settled: "delivered" or "givenUp"; None: not yet
    notify: bool = False  # spec.notify names sinks (a Batch's job uses the Batch's: see there)
    audio_seconds: float | None = None  # the result's duration × its channels (split)
    language: str | None = None  # status.result.language: the language transcribed
    # what it asks that only a multilingual model does (`engines.languages.multilingual_asks`)
    asks: tuple[str, ...] = ()
    model: str | None = None  # spec.engine.model: a model of its own, loaded when it runs

    @property
    def key(self) -> JobKey:
        return (self.namespace, self.name)

    @property
    def batch_key(self) -> BatchKey | None:
        return (self.namespace, self.batch) if self.batch else None

    @classmethod
    def from_raw(cls, raw: RawObject) -> JobRecord:
        meta = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        status = raw.get("status") or {}
        labels = meta.get("labels") or {}
        index = labels.get(LABEL_INDEX)
        lease = status.get("lease")
        error = status.get("lastError") or {}
        engine = (spec.get("engine") or {}).get("name")
        return cls(
            namespace=meta.get("namespace") or "default",
            name=meta["name"],
            uid=meta.get("uid") or "",
            resource_version=str(meta.get("resourceVersion") or ""),
            batch=spec.get("batchRef") or None,
            item=spec.get("item") or None,
            index=int(index) if index and str(index).isdigit() else None,
            phase=Phase(status.get("phase") or "Queued"),
            attempts=int(status.get("attempts") or 0),
            expired_leases=int(status.get("expiredLeases") or 0),
            failures=int(status.get("failures") or 0),
            releases=int(status.get("releases") or 0),
            max_attempts=int(spec.get("maxAttempts") or 5),
            max_releases=int(spec.get("maxReleases", 10)),
            lease=Lease.model_validate(lease) if lease else None,
            backoff_seconds=status.get("backoffSeconds"),
            offer=(status.get("offer") or {}).get("worker"),
            priority=int(spec.get("priority") or 0),
            created=_time(meta.get("creationTimestamp")),
            suspended=labels.get(LABEL_SUSPENDED) == "true",
            engine=engine,
            pool=str(spec.get("pool") or DEFAULT_POOL),
            started_at=_time(status.get("startedAt")),
            completed_at=_time(status.get("completedAt")),
            error_reason=error.get("reason"),
            error_message=error.get("message"),
            result=(status.get("result") or {}).get("transcript"),
            parts=tuple(
                Part.model_validate(p) for p in (status.get("progress") or {}).get("parts") or ()
            ),
            published=status.get("published") is not None,
            output=spec.get("output") is not None,
            notified=_notified(status.get("notified")),
            notify=bool(spec.get("notify")),
            audio_seconds=_audio_seconds(status.get("result")),
            language=(status.get("result") or {}).get("language") or None,
            asks=multilingual_asks(
                spec.get("language"),
                spec.get("languageOptions") or (),
                spec.get("languageScope"),
                (spec.get("transcript") or {}).get("translate"),
            ),
            model=(spec.get("engine") or {}).get("model") or None,
        )

    @property
    def to_publish(self) -> bool:
        """Succeeded, and its outputs and index entry not recorded as written yet."""
        return self.phase is Phase.SUCCEEDED and not self.published


@dataclass(frozen=True)
class BackoffObservation:
    """When the observer first saw a job wait `seconds` in backoff (after failure `failures`)."""

    failures: int
    seconds: float
    observed_at: float

    def over(self, now_mono: float) -> bool:
        return now_mono >= self.observed_at + self.seconds


class Marks:
    """Per Batch, which items changed since the last projection that was written.

    A mark carries a sequence number; `clear(batch, upto)` removes only marks made up to the
    projection's snapshot, so a change seen while a write is in flight is never dropped. A mark
    also says whether the item's phase may have moved (`moved`: the job's phase or attempt
    changed, or the job went). Every mark makes its Batch projected again; only a moved item's
    stored phase may differ from its job's without that being a heal. A change that cannot
    move the phase (a publish record, counters, a store verdict) leaves the judgement intact.
    """

    def __init__(self) -> None:
        self._seq = 0
        self._marks: defaultdict[BatchKey, dict[int, tuple[int, bool]]] = defaultdict(dict)
        self._lock = threading.Lock()

    def mark(self, batch: BatchKey, index: int, *, moved: bool = True) -> None:
        with self._lock:
            self._seq += 1
            _, before = self._marks[batch].get(index, (0, False))
            self._marks[batch][index] = (self._seq, moved or before)

    def seq(self) -> int:
        """The last mark's sequence number: taken before the jobs are read, the point to clear
        up to once their projection is written (a later change keeps its mark)."""
        with self._lock:
            return self._seq

    def moved(self, batch: BatchKey) -> frozenset[int]:
        """The items of `batch` whose phase may have moved. Taken after the jobs are read, so
        that a change that reached them after `seq()` is judged a change, not a heal."""
        with self._lock:
            marks = self._marks.get(batch, {})
            return frozenset(i for i, (_, moved) in marks.items() if moved)

    def clear(self, batch: BatchKey, upto: int) -> None:
        with self._lock:
            marks = self._marks.get(batch)
            if marks is None:
                return
            for index in [i for i, (seq, _) in marks.items() if seq <= upto]:
                del marks[index]
            if not marks:
                del self._marks[batch]

    def dirty(self) -> set[BatchKey]:
        with self._lock:
            return set(self._marks)


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
    free = min(record.releases, record.max_releases)
    return record.backoff_seconds is not None or record.attempts >= record.max_attempts + free


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
    """Every job the operator watches, as `JobRecord`s. The informer's consumer."""

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
        # Jobs whose transcript ConfigMaps may hold something nothing references any more: a
        # final job that failed, was cancelled or took more than one attempt, and a job that
        # took another attempt (a zombie's, or an abandoned one's, leftovers).
        self.cleanup: set[JobKey] = set()
        # Succeeded jobs whose result is not published yet (outputs, the Batch's index).
        self.publish: set[JobKey] = set()
        # Jobs deleted since the results store last heard of it: (namespace, name, uid).
        self.removed: set[tuple[str, str, str]] = set()
        # Called with (old, new) on every change, under the cache's lock (the dispatcher's
        # ready queue keeps itself current this way).
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
            # A job seen for the first time (in the first list, or created since) is not a
            # change since the last projection: if the status disagrees with it, that is a heal
            # (an operator restart finds them all).
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

    def batches(self) -> set[BatchKey]:
        with self._lock:
            return set(self._by_batch)

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

    def __len__(self) -> int:
        with self._lock:
            return len(self._jobs)
