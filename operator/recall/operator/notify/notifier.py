"""The leader's event delivery: every finished job's and Batch's event, to each sink, at least once.
`run_once` is one pass; `run(stop)` passes on its own thread (a sink never holds the controller
or a job).

**What is owed** is derived, not stored: a job Succeeded (and published) or Failed whose status
has no settled `notified` record owes its event; so does a Complete Batch. Ids are stable
(`events.event_id`), so the terminal write is the record "before" the delivery: a new leader, a
restarted operator or a resend finds the same events with the same ids.

**What is written** (DESIGN §4e): at most two status writes per event: at the first failed try
(`notified` with attempts and lastError, `Notified` False) and when it settles (`notified.time`:
every sink acknowledged it or gave up; `Notified` True, or False with reason GivenUp); none per
retry; one the API server refuses (Invalid) is logged, not tried again. A Batch's record keeps
its items' events as counts and ranges (`records`). An operator killed between a delivery and
its record sends that event again, with the same id.

**Retries**: an unavailable sink (a transport error, 408, 429, 5xx) backs off as a whole, with
jitter, to `backoff_cap`, then sends one event at a time until it answers. An event a sink
refuses (another 4xx, a redirect, a refused address) is given up after `max_refusals` tries,
with a Warning Event (`recall notify resend` sends it again). At most `in_flight` events per
sink are in flight. A missing Secret or key posts a Warning Event and records `Notified=False
KeyMissing` on the first event it holds up; nothing is ever sent unsigned.

**Deletion**: an event owed when its object is deleted (a job's from the cache, a Batch's
from `batch_deleted`) is still tried for `delete_seconds`, then given up; a Batch's deletion
(`deletion_pending`, from its finalizer) waits up to that bound for its items' events and its
own, and decides nothing before this term's first pass knows what is owed. An item event no
sink of its Batch wants is settled as it happens.

**Leadership**: only the leader delivers or keeps anything: a standby queues nothing (a term's
first pass finds what is owed in the cache) and, when it stops leading, forgets what it owed,
loaded and timed.

**Cost**: a finished job that no sink wants (its Batch's, a default; its own sinks' types are
not in the cache) is never read; one whose own sinks want none of its type is read once per
version (not again at a relist or a new term). A pass costs O(what it loads, sends and
records) (`index`): never a walk over a Batch's items.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor

from recall.base import log, metrics
from recall.base.clock import SYSTEM, Clock
from recall.kube import Api, ApiError, Invalid, NotFound
from recall.operator.notify import records
from recall.operator.notify.index import Items
from recall.operator.notify.outbox import Outbox
from recall.operator.notify.records import Batches, Sinks
from recall.operator.notify.send import Sender
from recall.operator.notify.settings import NotifySettings
from recall.operator.notify.state import Key, Owed, Pass, holds, item_types, owes, wanted
from recall.operator.reconcile.cache import JobCache
from recall.operator.reconcile.record import BatchKey, JobRecord
from recall.protocol.observer import JobKey
from recall.resources.batch import Batch, BatchNotified, NotifiedItems

_log = log.get("notify")
LOAD_PER_PASS = 256


class Notifier:
    """Delivers events; see the module doc."""

    def __init__(
        self,
        store: Api,
        cache: JobCache,
        *,
        leading: threading.Event,
        batches: Callable[[], dict[BatchKey, Batch]],
        settings: NotifySettings | None = None,
        clock: Clock = SYSTEM,
        sender: Sender | None = None,
    ) -> None:
        self.store = store
        self.cache = cache
        self.leading = leading
        self.batches = batches
        self.settings = settings or NotifySettings()
        self.clock = clock
        self._lock = threading.Lock()
        self._wake = threading.Event()
        sender = sender or Sender(self.settings.allow, self.settings.timeout)
        self.outbox = Outbox(store, self.settings, clock, sender, self._lock, self._wake)
        self._due: deque[Key] = deque()  # jobs that may owe an event, in the order seen
        self._due_set: set[Key] = set()
        self._due_batches: set[Key] = set()
        self._waiting: set[Key] = set()  # Batch events delivered, their items not settled
        self._items = Items()
        self._deleting: dict[BatchKey, float] = {}
        # Jobs read and found to owe nothing, at their `_mark`: kept across terms (a fact of
        # those versions), dropped when the job goes.
        self._unowed: dict[JobKey, str] = {}
        self._term = False
        self._lapsed = False  # a change came while not leading: the term is over
        self.loaded = threading.Event()  # this term knows what is owed (its first pass ran)
        # Made before the informer starts (a cache already filled is counted as it stands).
        for record in cache.all():
            self._items.changed(None, record)
        cache.listeners.append(self._changed)

    # -- inputs ------------------------------------------------------------------------------

    def _changed(self, old: JobRecord | None, new: JobRecord | None) -> None:
        """The cache's listener (under its lock): count it, note what became owed, or went."""
        with self._lock:
            self._items.changed(old, new)
            if new is None and old is not None:
                self._unowed.pop(old.key, None)
                self.outbox.deleted(("job", old.namespace, old.name), self.clock.monotonic())
                return
            leading = self.leading.is_set()
            self._lapsed |= not leading  # leading again by the next pass: a new term all the same
            if new is None or not owes(new) or not leading:
                return  # a standby queues nothing: a term's first pass seeds from the cache
            if not (new.notify or new.batch or self.settings.default_sinks):
                return  # no sink can want it: nothing to read
            if not new.batch_key and self._unowed.get(new.key) == self._mark(
                new.resource_version, None
            ):
                return  # read already: no sink of its own wants it (a Batch's job: `_wanted`)
            key = ("job", new.namespace, new.name)
            if key in self.outbox.owed or key in self._due_set:
                return
            self._due_set.add(key)
            self._due.append(key)
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def batch_deleted(self, key: BatchKey) -> None:
        """A Batch is gone: its own event, if owed, is given up `delete_seconds` later."""
        with self._lock:
            self._deleting.pop(key, None)
            self.outbox.deleted(("batch", *key), self.clock.monotonic())

    def deletion_pending(self, batch: Batch) -> bool:
        """For a deleted Batch's finalizer: True while its items' events or its own
        `batch.completed` are owed and not settled, and while this term has not loaded what is
        owed yet (an operator just started); `delete_seconds` at most after the first call."""
        key, mono, defaults = batch.key, self.clock.monotonic(), self.settings.default_sinks
        with self._lock:
            first = self._deleting.setdefault(key, mono)
            if mono - first >= self.settings.delete_seconds:
                self._deleting.pop(key, None)
                return False
            if not self.loaded.is_set():
                return True
            tally = self._items.of(key)
            items = tally is not None and tally.pending(item_types(batch, defaults)) > 0
            if items or (batch.status.complete and holds(batch, defaults)):
                return True
            self._deleting.pop(key, None)
        return False

    # -- the loop ----------------------------------------------------------------------------

    def run(self, stop: threading.Event, period: float = 0.5) -> None:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(self.settings.threads, thread_name_prefix="notify") as pool:
            while not stop.is_set():
                try:
                    self.run_once(pool)
                except Exception:
                    _log.exception("notify_pass_failed")
                self.clock.wait(self._wake, period)
                self._wake.clear()
        self.outbox.sender.close()

    def run_once(self, pool: Executor | None = None) -> Pass:
        """One pass: load what became owed, send what is due, record what settled. Without a
        pool the deliveries run here, one after another. Never raises for a sink or the API."""
        done = Pass()
        with self._lock:
            lapsed, self._lapsed = self._lapsed, False
        if lapsed or not self.leading.is_set():
            self._forget()  # a standby keeps nothing: the next term starts from status
        if not self.leading.is_set() or not self.cache.synced.is_set():
            return done
        batches = Batches(self.store, self.batches())
        if not self._term:
            self._term = True
            self._seed_jobs(batches, done)
            self.loaded.set()
        self._seed_batches(batches)
        with self._lock:
            batch_keys = list(self._due_batches)
            self._due_batches.clear()
        jobs = self._take_jobs(batches, done)
        for key, version in [*jobs, *((k, None) for k in batch_keys)]:
            owed = self._load(key, batches, done, version)
            if owed is not None:
                self.outbox.owe(owed)
                done.loaded += 1
        self.outbox.send(pool, done)
        self._record(done)
        with self._lock:
            metrics.NOTIFY_PENDING.set(len(self.outbox.owed) + len(self._due_set))
        return done

    def pending(self) -> int:
        """Events owed and not settled (loaded or not)."""
        with self._lock:
            return len(self._due_set) + sum(1 for o in self.outbox.owed.values() if not o.settled)

    def _forget(self) -> None:
        """Not leading: keep nothing of a term (what it owed, loaded, queued or waited for)."""
        with self._lock:
            self.loaded.clear()
            self.outbox.clear()
            self._due.clear()
            self._due_set.clear()
            self._due_batches.clear()
            self._waiting.clear()
            self._deleting.clear()
        self._term = False

    # -- loading -----------------------------------------------------------------------------

    @staticmethod
    def _mark(version: str, batch: Batch | None) -> str:
        """What a job found to owe nothing is remembered at: its version, and its Batch's sinks
        (a Batch whose sinks change may want the job's event after all)."""
        sinks = [s.to_api() for s in (batch.spec.notify or [])] if batch is not None else None
        return f"{version}/{json.dumps(sinks, sort_keys=True)}"

    def _wanted(self, record: JobRecord, batches: Batches) -> bool:
        try:
            batch = batches.get(record.batch_key) if record.batch_key else None
        except ApiError:
            return True  # not known now: loading it tries again
        with self._lock:
            if self._unowed.get(record.key) == self._mark(record.resource_version, batch):
                return False  # read already (at this version, and its Batch's): owes none
        return wanted(record, batch, self.settings.default_sinks)

    def _seed_jobs(self, batches: Batches, done: Pass) -> None:
        """A term's start: every finished job whose event a sink may want and is not settled."""
        owing = [r for r in self.cache.all() if owes(r)]
        keys = [("job", r.namespace, r.name) for r in owing if self._wanted(r, batches)]
        done.skipped += len(owing) - len(keys)
        with self._lock:
            for key in keys:
                if key not in self._due_set:
                    self._due_set.add(key)
                    self._due.append(key)

    def _seed_batches(self, batches: Batches) -> None:
        for key, batch in batches.known.items():
            if batch.status.complete and holds(batch, self.settings.default_sinks):
                with self._lock:
                    if ("batch", *key) not in self.outbox.owed:
                        self._due_batches.add(("batch", *key))

    def _take_jobs(self, batches: Batches, done: Pass) -> list[tuple[Key, str]]:
        """Up to LOAD_PER_PASS due jobs, at the cache's version; those no sink wants unread."""
        chosen: list[tuple[Key, str]] = []
        while len(chosen) < LOAD_PER_PASS:
            with self._lock:
                if not self._due:
                    break
                key = self._due.popleft()
                self._due_set.discard(key)
            record = self.cache.get((key[1], key[2]))
            if record is None or not owes(record):
                continue
            if not self._wanted(record, batches):
                done.skipped += 1
                continue
            chosen.append((key, record.resource_version))
        return chosen

    def _load(self, key: Key, batches: Batches, done: Pass, version: str | None) -> Owed | None:
        """The event `key` owes, read now; None when it owes none or could not be read (the
        next pass retries). A job that owes none is remembered at the cache's `version` (what
        was read is that or later): read again only once the cache holds another version."""
        kind, namespace, name = key
        try:
            sinks = Sinks(self.settings.default_sinks, self.settings.secret_namespace)
            if kind == "job":
                owed = records.load_job(self.store, namespace, name, batches, sinks)
                if owed is None and version is not None:
                    record = self.cache.get((namespace, name))
                    batch_key = record.batch_key if record is not None else None
                    batch = batches.known.get(batch_key) if batch_key else None
                    self._owes_nothing((namespace, name), self._mark(version, batch))
                return owed
            return records.load_batch(self.store, namespace, name, sinks)
        except ApiError as e:
            done.errors.append(e.message)
            with self._lock:  # the next pass tries again
                if kind == "batch":
                    self._due_batches.add(key)
                elif key not in self._due_set:
                    self._due_set.add(key)
                    self._due.append(key)
            return None

    def _owes_nothing(self, key: JobKey, version: str) -> None:
        """Remember that `key` at `version` owes nothing, unless it went meanwhile (its
        deletion drops the memory: the cache's lock is never taken under ours)."""
        with self._lock:
            self._unowed[key] = version
        if self.cache.get(key) is None:
            with self._lock:
                self._unowed.pop(key, None)

    # -- records -----------------------------------------------------------------------------

    def _record(self, done: Pass) -> None:
        """Write the record of each event that settled or first failed since the last pass,
        and of each delivered Batch event whose items have settled since."""
        with self._lock:
            keys = self.outbox.dirty | self._waiting
            self.outbox.dirty = set()
        for key in keys:
            with self._lock:
                o = self.outbox.owed.get(key)
                if o is None:
                    self._waiting.discard(key)
                    continue
            settled = o.settled
            if not settled and (o.failure_written or o.error() is None):
                continue
            if o.deleted_at is not None:
                if settled:
                    with self._lock:
                        self.outbox.owed.pop(o.key, None)
                continue
            if settled and o.key[0] == "batch" and self._items_pending(o):
                settled = False  # the Batch settles once its items have
                with self._lock:
                    self._waiting.add(key)
                if o.failure_written or o.error() is None:
                    continue
            items = self._items_of(o) if o.key[0] == "batch" else None
            self._write(o, settled, items, done)

    def _write(self, o: Owed, settled: bool, items: NotifiedItems | None, done: Pass) -> None:
        try:
            records.write(self.store, o, settled, items, self.clock.now())
        except NotFound:  # deleted: a Batch after its finalizer's bound (delete_seconds)
            _log.warning("notify_object_gone", id=o.event.id, object=o.ref.name)
            with self._lock:
                self.outbox.owed.pop(o.key, None)
                self._waiting.discard(o.key)
            return
        except Invalid as e:  # refused for good: written again, it would be refused again
            done.errors.append(e.message)
            _log.warning("notify_record_refused", id=o.event.id, error=e.message[:300])
            o.failure_written = True  # kept in `owed` (not loaded and sent again), not retried
            return
        except ApiError as e:
            done.errors.append(e.message)
            with self._lock:
                self.outbox.dirty.add(o.key)  # the next pass writes it
            return
        done.recorded += 1
        o.failure_written = True
        if settled:
            done.given_up += sum(1 for t in o.tries.values() if t.done == "givenUp")
            with self._lock:
                self.outbox.owed.pop(o.key, None)
                self._waiting.discard(o.key)

    def _items_pending(self, o: Owed) -> bool:
        """Whether a Batch's item events are owed and not settled (a count: O(1))."""
        key = (o.key[1], o.key[2])
        types = item_types(self.batches().get(key), self.settings.default_sinks)
        with self._lock:
            tally = self._items.of(key)
            return tally is not None and tally.pending(types) > 0

    def _items_of(self, o: Owed) -> NotifiedItems:
        """A Batch's item events: the tally of its jobs; once the TTL deleted them, the
        record it has (a resent Batch event keeps its items' counts)."""
        key = (o.key[1], o.key[2])
        types = item_types(self.batches().get(key), self.settings.default_sinks)
        if not types:
            return NotifiedItems()
        with self._lock:
            tally = self._items.of(key)
            if tally is not None:
                return tally.record(types)
        kept = o.recorded.items if isinstance(o.recorded, BatchNotified) else None
        return kept or NotifiedItems()
