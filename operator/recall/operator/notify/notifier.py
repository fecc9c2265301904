"""The leader's event delivery: every finished job's and Batch's event, to each sink, at least once.

    notifier = Notifier(store, cache, leading=..., batches=..., settings=NotifySettings())
    notifier.run_once()        # one pass; tests call it directly
    notifier.run(stop)         # its own thread: a sink never holds the controller or a job

**What is owed** is derived, not stored: a job Succeeded (and published) or Failed whose status
has no settled `notified` record owes its event; so does a Complete Batch. The id is a hash of
the object's uid and the type (`events.event_id`), so the terminal write that finished the job
is the record "before" the delivery: a new leader, a restarted operator or a resend finds the
same events with the same ids, and a repeat carries the id the receiver has already seen.

**What is written** (DESIGN §4e): at most two status writes per event: at the first failed try
(`notified` with attempts and lastError, a `Notified` condition False) and when the event is
settled (`notified.time`: every sink acknowledged it or gave up; `Notified` True, or False
with reason GivenUp). A sink that is down costs no writes per retry. A Batch's own record
keeps its items' events as counts and the given-up indexes as compressed ranges. An operator
killed between a delivery and its record sends that event again, with the same id.

**Retries**: a sink that is unavailable (a transport error, 408, 429, 5xx) backs off as a
whole, with jitter, to `backoff_cap`, then sends one event at a time until it answers: a sink
down for an hour is retried every `backoff_cap` seconds, not by every event. An event a sink
refuses (another 4xx, a redirect, a refused address) is tried `max_refusals` times, then given
up with a Warning Event (`recall notify resend` sends it again). At most `in_flight` events
per sink are in flight. A missing Secret or key posts a Warning Event and records
`Notified=False KeyMissing` on the first event it holds up; nothing is ever sent unsigned.

**Deletion**: an event already owed when its object is deleted is still tried for
`delete_seconds`, then given up; a Batch's deletion waits for its items' events up to that
bound (`deletion_pending`, called by its finalizer's handler). Only the leader delivers.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import Executor

from recall.base import faults, log, metrics
from recall.base.clock import SYSTEM, Clock
from recall.kube import Api, ApiError, NotFound, ObjectRef
from recall.operator.notify import events, records
from recall.operator.notify.records import Sinks
from recall.operator.notify.send import Answer, Outcome, Sender
from recall.operator.notify.settings import NotifySettings
from recall.operator.notify.sign import HEADER, sign
from recall.operator.notify.state import (
    Gate,
    Key,
    Owed,
    Pass,
    Try,
    answered,
    holds,
    owes,
    signing_keys,
)
from recall.operator.reconcile.cache import BatchKey, JobCache, JobRecord
from recall.resources.batch import Batch, NotifiedItems

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
        self.sender = sender or Sender(self.settings.allow, self.settings.timeout)
        self.backoff = self.settings.backoff
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._due: set[Key] = set()
        self._owed: dict[Key, Owed] = {}
        self._gates: dict[str, Gate] = {}
        self._keys: dict[tuple[str, str], tuple[dict[str, bytes] | None, float]] = {}
        self._warned: set[str] = set()
        self._deleting: dict[BatchKey, float] = {}
        self._term = False
        self._tries = 0  # requests sent by this process
        cache.listeners.append(self._changed)

    # -- inputs ------------------------------------------------------------------------------

    def _changed(self, old: JobRecord | None, new: JobRecord | None) -> None:
        """The cache's listener (under its lock): note what became owed, or went."""
        if new is None and old is not None:
            gone = ("job", old.namespace, old.name)
            with self._lock:
                owed = self._owed.get(gone)
                if owed is not None and owed.deleted_at is None:
                    owed.deleted_at = self.clock.monotonic()
            return
        if new is not None and owes(new):
            with self._lock:
                self._due.add(("job", new.namespace, new.name))
            self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def holds(self, batch: Batch) -> bool:
        return holds(batch, self.settings.default_sinks)

    def deletion_pending(self, batch: Batch) -> bool:
        """For a deleted Batch's finalizer: True while its items' owed events are still being
        tried, for `delete_seconds` at most after the first call."""
        key = batch.key
        mono = self.clock.monotonic()
        with self._lock:
            first = self._deleting.setdefault(key, mono)
            if mono - first >= self.settings.delete_seconds:
                self._deleting.pop(key, None)
                return False
            owed = [o for o in self._owed.values() if o.batch == key and o.key[0] == "job"]
            due = [k for k in self._due if k[0] == "job"]
        if any(not o.settled for o in owed):
            return True
        for k in due:
            record = self.cache.get((k[1], k[2]))
            if record is not None and record.batch_key == key:
                return True
        with self._lock:
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
        self.sender.close()

    def run_once(self, pool: Executor | None = None) -> Pass:
        """One pass: load what became owed, send what is due, record what settled. Without a
        pool the deliveries run here, one after another. Never raises for a sink or the API."""
        done = Pass()
        if not self.leading.is_set() or not self.cache.synced.is_set():
            if self._term:
                with self._lock:  # a standby keeps nothing: the next term starts from status
                    self._owed.clear()
                    self._due.clear()
                    self._gates.clear()
                self._term = False
            return done
        if not self._term:
            self._term = True
            with self._lock:
                self._due.update(("job", r.namespace, r.name) for r in self.cache.all() if owes(r))
        self._seed_batches()
        with self._lock:
            batch_keys = [k for k in self._due if k[0] == "batch"]
            job_keys = [k for k in self._due if k[0] == "job"][:LOAD_PER_PASS]
            for k in batch_keys + job_keys:
                self._due.discard(k)
        for key in job_keys + batch_keys:
            owed = self._load(key, done)
            if owed is not None:
                with self._lock:
                    self._owed.setdefault(key, owed)
                done.loaded += 1
        self._send(pool, done)
        self._record(done)
        with self._lock:
            metrics.NOTIFY_PENDING.set(len(self._owed) + len(self._due))
        return done

    def pending(self) -> int:
        """Events owed and not settled (loaded or not)."""
        with self._lock:
            return len(self._due) + sum(1 for o in self._owed.values() if not o.settled)

    # -- loading -----------------------------------------------------------------------------

    def _seed_batches(self) -> None:
        for key, batch in self.batches().items():
            if batch.status.complete and self.holds(batch):
                with self._lock:
                    if ("batch", *key) not in self._owed:
                        self._due.add(("batch", *key))

    def _load(self, key: Key, done: Pass) -> Owed | None:
        kind, namespace, name = key
        try:
            sinks = Sinks(self.settings.default_sinks, self.settings.secret_namespace)
            if kind == "job":
                return records.load_job(self.store, namespace, name, self.batches(), sinks)
            return records.load_batch(self.store, namespace, name, sinks)
        except ApiError as e:
            done.errors.append(e.message)
            with self._lock:
                self._due.add(key)  # the next pass tries again
            return None

    # -- sending -----------------------------------------------------------------------------

    def _secret(self, t: Try) -> list[bytes] | str:
        """The signing keys of `t`'s sink (the key, and `<key>.next` while rotating), or why
        there are none; a Secret is read again every `secret_seconds`."""
        ref = t.sink.secret_ref
        mono = self.clock.monotonic()
        cached = self._keys.get((t.secrets, ref.name))
        if cached is None or mono - cached[1] >= self.settings.secret_seconds:
            cached = (self.store.get_secret(t.secrets, ref.name), mono)
            self._keys[(t.secrets, ref.name)] = cached
        return signing_keys(cached[0], t)

    def _send(self, pool: Executor | None, done: Pass) -> None:
        mono = self.clock.monotonic()
        chosen: list[tuple[Owed, Try, list[bytes]]] = []
        with self._lock:
            owed = list(self._owed.values())
        for o in owed:
            if o.deleted_at is not None and mono - o.deleted_at >= self.settings.delete_seconds:
                self._give_up_all(o, "the object was deleted before its event was delivered")
                continue
            for t in o.tries.values():
                if t.done or t.busy or t.at > mono:
                    continue
                with self._lock:
                    gate = self._gates.setdefault(t.gate, Gate())
                    limit = self.settings.in_flight if gate.failures == 0 else 1
                    if gate.at > mono or gate.in_flight >= limit:
                        continue
                try:
                    keys = self._secret(t)
                except ApiError as e:
                    done.errors.append(e.message)
                    continue
                if isinstance(keys, str):
                    self._key_missing(o, t, keys, mono)
                    continue
                with self._lock:
                    gate.in_flight += 1
                    t.busy = True
                chosen.append((o, t, keys))
        for o, t, keys in chosen:
            done.sent += 1
            if pool is None:
                self._deliver(o, t, keys)
            else:
                pool.submit(self._deliver, o, t, keys)

    def _deliver(self, o: Owed, t: Try, keys: list[bytes]) -> None:
        """One try, signed now (a retry gets a new timestamp; its id and body stay)."""
        stamp = int(self.clock.now().timestamp())
        headers = {
            "Content-Type": events.CONTENT_TYPE,
            HEADER: sign(o.event.body, keys, stamp),
        }
        try:
            answer = self.sender.post(t.sink.url, headers, o.event.body)
        except Exception as e:  # a bug in a sender must not leave the try busy for ever
            answer = Answer(Outcome.UNAVAILABLE, error=f"{type(e).__name__}: {e}"[:300])
        with self._lock:
            self._tries += 1
            tries = self._tries
        faults.hit("operator-after-notify", tries=tries)  # sent, not recorded: a crash here
        self._answered(o, t, answer)
        self._wake.set()

    def _answered(self, o: Owed, t: Try, answer: Answer) -> None:
        mono = self.clock.monotonic()
        with self._lock:
            gate = self._gates.setdefault(t.gate, Gate())
            gate.in_flight = max(0, gate.in_flight - 1)
            metrics.NOTIFY_DELIVERIES.labels(outcome=answer.outcome.value).inc()
            given_up = answered(t, gate, answer, mono, self.backoff, self.settings.max_refusals)
        if answer.outcome is not Outcome.DELIVERED:
            _log.info(
                "notify_failed",
                id=o.event.id,
                type=o.event.type,
                object=o.ref.name,
                namespace=o.ref.namespace,
                sink=t.sink.url,
                outcome=answer.outcome.value,
                attempt=t.attempts,
                error=answer.error,
            )
        if given_up:
            self._gave_up(o, t)

    def _gave_up(self, o: Owed, t: Try) -> None:
        metrics.NOTIFY_DELIVERIES.labels(outcome="given_up").inc()
        _log.warning("notify_given_up", id=o.event.id, object=o.ref.name, sink=t.sink.url)
        kind = "job" if o.key[0] == "job" else "batch"
        self._event(
            o.ref,
            "NotifyGivenUp",
            f"{o.event.type} to {t.sink.url} given up after {t.attempts} tries: {t.error}; "
            f"send it again with: recall notify resend {kind}/{o.ref.name}",
        )

    def _give_up_all(self, o: Owed, why: str) -> None:
        for t in o.tries.values():
            if not t.done and not t.busy:
                t.done, t.error = "givenUp", why
                self._gave_up(o, t)

    def _key_missing(self, o: Owed, t: Try, why: str, mono: float) -> None:
        with self._lock:
            gate = self._gates.setdefault(t.gate, Gate())
            gate.at = mono + self.settings.secret_seconds  # one event asks again, later
            t.error = why
            warn = t.gate not in self._warned
            self._warned.add(t.gate)
        if warn:
            _log.warning("notify_key_missing", sink=t.sink.url, error=why, object=o.ref.name)
            self._event(o.ref, "NotifyKeyMissing", f"{t.sink.url}: {why}; its events wait")

    # -- records -----------------------------------------------------------------------------

    def _record(self, done: Pass) -> None:
        with self._lock:
            owed = list(self._owed.values())
        for o in owed:
            settled = o.settled
            if not settled and (o.failure_written or o.error() is None):
                continue
            if o.deleted_at is not None:
                if settled:
                    with self._lock:
                        self._owed.pop(o.key, None)
                continue
            items = self._items(o) if o.key[0] == "batch" else None
            if settled and items is not None and items.pending:
                settled = False  # the Batch settles once its items have
                if o.failure_written or o.error() is None:
                    continue
            try:
                records.write(self.store, o, settled, items, self.clock.now())
            except NotFound:
                with self._lock:
                    self._owed.pop(o.key, None)
                continue
            except ApiError as e:
                done.errors.append(e.message)
                continue
            done.recorded += 1
            o.failure_written = True
            if settled:
                done.given_up += sum(1 for t in o.tries.values() if t.done == "givenUp")
                with self._lock:
                    self._owed.pop(o.key, None)

    def _items(self, o: Owed) -> NotifiedItems:
        key = (o.key[1], o.key[2])
        return records.items_of(
            self.cache, self.batches().get(key), key, self.settings.default_sinks
        )

    def _event(self, about: ObjectRef, reason: str, message: str) -> None:
        with contextlib.suppress(ApiError):  # best effort: the status and the log say it too
            self.store.post_event(about, "Warning", reason, message[:1000])
