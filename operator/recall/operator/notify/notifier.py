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
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Literal

from recall.base import faults, log, metrics
from recall.base.clock import SYSTEM, Clock
from recall.kube import Api, ApiError, NotFound, ObjectRef
from recall.operator.notify import events
from recall.operator.notify.send import Answer, Outcome, Sender
from recall.operator.notify.settings import NotifySettings
from recall.operator.notify.sign import HEADER, sign
from recall.operator.reconcile.cache import BatchKey, JobCache, JobRecord
from recall.resources import Phase, set_condition
from recall.resources.batch import Batch, BatchNotified, NotifiedItems
from recall.resources.indexes import encode
from recall.resources.job import Notified, Sink
from recall.transcripts.outputs import OutputInvalid, output_url

_log = log.get("notify")
LOAD_PER_PASS = 256
Key = tuple[str, str, str]  # ("job" | "batch", namespace, name)
ITEM_TYPES = (events.ITEM_SUCCEEDED, events.ITEM_FAILED)


@dataclass
class Try:
    """One sink's tries of one event (in memory; the status keeps what must outlive us)."""

    sink: Sink
    secrets: str  # the namespace of its Secret
    attempts: int = 0
    refusals: int = 0
    at: float = float("-inf")  # not before (monotonic)
    busy: bool = False
    done: str | None = None  # "delivered" | "givenUp"
    error: str | None = None

    @property
    def gate(self) -> str:
        ref = self.sink.secret_ref
        return f"{self.sink.url} {self.secrets}/{ref.name}/{ref.key}"


@dataclass
class Owed:
    """One event owed to its sinks."""

    key: Key
    event: events.Event
    tries: dict[str, Try]
    ref: ObjectRef
    recorded: Notified | None  # the record in status when loaded
    conditions: list[Any]
    batch: BatchKey | None = None  # the Batch of an item event, or of the Batch event itself
    deleted_at: float | None = None
    failure_written: bool = False

    @property
    def attempts(self) -> int:
        before = self.recorded.attempts if self.recorded else 0
        return before + sum(t.attempts for t in self.tries.values())

    @property
    def settled(self) -> bool:
        return all(t.done for t in self.tries.values())

    def error(self) -> str | None:
        errors = [t.error for t in self.tries.values() if t.error]
        return errors[-1] if errors else None


@dataclass
class Gate:
    """One sink's health: a sink that failed backs off as a whole and takes one try at a time."""

    failures: int = 0
    at: float = float("-inf")
    in_flight: int = 0


@dataclass
class Pass:
    loaded: int = 0
    sent: int = 0
    recorded: int = 0
    given_up: int = 0
    errors: list[str] = field(default_factory=list)


def wants_events(batch: Batch, defaults: Iterable[Sink]) -> bool:
    """Whether `batch` has any sink (its own or a default)."""
    return bool(batch.spec.notify) or any(True for _ in defaults)


def holds(batch: Batch, defaults: Iterable[Sink]) -> bool:
    """Whether `batch`'s TTL must wait for its events (pure): it wants events and their
    record is not settled yet."""
    settled = batch.status.notified is not None and batch.status.notified.time is not None
    return wants_events(batch, defaults) and not settled


def owes(record: JobRecord) -> bool:
    """Whether a job's event may be owed: final, published when Succeeded, not settled."""
    if record.notified is not None:
        return False
    return record.phase is Phase.FAILED or (record.phase is Phase.SUCCEEDED and record.published)


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

    def _sinks(self, own: list[Sink] | None, namespace: str, type_: str) -> dict[str, Try]:
        tries = {s.url: Try(s, namespace) for s in own or [] if s.wants(type_)}
        for s in self.settings.default_sinks:
            if s.wants(type_):
                tries.setdefault(s.url, Try(s, self.settings.secret_namespace))
        return tries

    def _seed_batches(self) -> None:
        for key, batch in self.batches().items():
            if batch.status.complete and self.holds(batch):
                with self._lock:
                    if ("batch", *key) not in self._owed:
                        self._due.add(("batch", *key))

    def _load(self, key: Key, done: Pass) -> Owed | None:
        kind, namespace, name = key
        try:
            if kind == "job":
                return self._load_job(namespace, name)
            return self._load_batch(namespace, name)
        except ApiError as e:
            done.errors.append(e.message)
            with self._lock:
                self._due.add(key)  # the next pass tries again
            return None

    def _load_job(self, namespace: str, name: str) -> Owed | None:
        job = self.store.get_job(namespace, name)
        if job is None:
            return None
        type_ = events.job_type(job)
        recorded = job.status.notified
        if type_ is None or (recorded is not None and recorded.time is not None):
            return None
        if job.spec.batch_ref:
            # The Batch as kopf delivered it; at start-up the jobs can come first: read it.
            batch = self.batches().get((namespace, job.spec.batch_ref))
            if batch is None:
                batch = self.store.get_batch(namespace, job.spec.batch_ref)
            own = batch.spec.notify if batch is not None else None
        else:
            own = job.spec.notify
        tries = self._sinks(own, namespace, type_)
        if not tries:
            return None
        outputs = []
        if job.spec.output is not None and job.status.published is not None:
            try:
                outputs = [
                    output_url(job.spec.output, f, job) for f in job.status.published.formats
                ]
            except OutputInvalid:
                outputs = []
        for url in recorded.delivered if recorded else []:
            if url in tries:
                tries[url].done = "delivered"
        return Owed(
            ("job", namespace, name),
            events.job_event(job, type_, outputs),
            tries,
            ObjectRef("TranscriptionJob", namespace, name, job.metadata.uid),
            recorded,
            list(job.status.conditions),
            batch=(namespace, job.spec.batch_ref) if job.spec.batch_ref else None,
        )

    def _load_batch(self, namespace: str, name: str) -> Owed | None:
        batch = self.store.get_batch(namespace, name)
        if batch is None or not batch.status.complete or not self.holds(batch):
            return None
        recorded = batch.status.notified
        tries = self._sinks(batch.spec.notify, namespace, events.BATCH_COMPLETED)
        for url in recorded.delivered if recorded else []:
            if url in tries:
                tries[url].done = "delivered"
        return Owed(
            ("batch", namespace, name),
            events.batch_event(batch),
            tries,
            ObjectRef("Batch", namespace, name, batch.metadata.uid),
            recorded,
            list(batch.status.conditions),
            batch=(namespace, name),
        )

    # -- sending -----------------------------------------------------------------------------

    def _secret(self, t: Try) -> list[bytes] | str:
        """The signing keys of `t`'s sink (the key, and `<key>.next` while rotating), or why
        there are none."""
        ref = t.sink.secret_ref
        mono = self.clock.monotonic()
        cached = self._keys.get((t.secrets, ref.name))
        if cached is None or mono - cached[1] >= self.settings.secret_seconds:
            data = self.store.get_secret(t.secrets, ref.name)
            self._keys[(t.secrets, ref.name)] = (data, mono)
        else:
            data = cached[0]
        if data is None:
            return f"KeyMissing: Secret {t.secrets}/{ref.name} does not exist"
        keys = [data[k] for k in (ref.key, f"{ref.key}.next") if data.get(k)]
        if not data.get(ref.key):
            return f"KeyMissing: Secret {t.secrets}/{ref.name} has no key {ref.key}"
        return keys

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
        given_up = False
        with self._lock:
            gate = self._gates.setdefault(t.gate, Gate())
            gate.in_flight = max(0, gate.in_flight - 1)
            t.busy = False
            t.attempts += 1
            metrics.NOTIFY_DELIVERIES.labels(outcome=answer.outcome.value).inc()
            if answer.outcome is Outcome.DELIVERED:
                t.done, t.error = "delivered", None
                gate.failures, gate.at = 0, float("-inf")
            elif answer.outcome is Outcome.UNAVAILABLE:
                t.error = answer.error
                delay = self.backoff.delay(gate.failures)
                gate.failures += 1
                gate.at = mono + max(delay, min(answer.retry_after or 0, self.backoff.cap))
                t.at = gate.at
            else:
                t.error = answer.error
                t.refusals += 1
                gate.failures, gate.at = 0, float("-inf")  # it answers: not a sink failure
                if t.refusals >= self.settings.max_refusals:
                    t.done, given_up = "givenUp", True
                else:
                    t.at = mono + self.backoff.delay(t.refusals - 1)
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
                self._write(o, settled, items)
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
        """A Batch's item events as counts and the given-up indexes as ranges."""
        batch = self.batches().get((o.key[1], o.key[2]))
        wanted = (batch.spec.notify if batch else None) or []
        if not any(s.wants(t) for s in [*wanted, *self.settings.default_sinks] for t in ITEM_TYPES):
            return NotifiedItems()
        delivered, given_up, pending = 0, [], 0
        for r in self.cache.batch_jobs((o.key[1], o.key[2])).values():
            if r.notified == "delivered":
                delivered += 1
            elif r.notified == "givenUp":
                given_up.append(r.index if r.index is not None else -1)
            elif owes(r):
                pending += 1
        ranges, _ = encode(sorted(i for i in given_up if i >= 0))
        return NotifiedItems(
            delivered=delivered,
            given_up=len(given_up),
            pending=pending,
            given_up_indexes=ranges or None,
        )

    def _write(self, o: Owed, settled: bool, items: NotifiedItems | None) -> None:
        tries = o.tries.values()
        record: dict[str, Any] = {
            "id": o.event.id,
            "type": o.event.type,
            "attempts": o.attempts,
            "delivered": sorted(u for u, t in o.tries.items() if t.done == "delivered"),
            "givenUp": sorted(u for u, t in o.tries.items() if t.done == "givenUp"),
            "lastError": (o.error() or "")[:1000] or None,
        }
        if o.recorded is not None:
            record["delivered"] = sorted({*record["delivered"], *o.recorded.delivered})
        now = self.clock.now()
        status: Literal["True", "False"]
        if settled:
            record["time"] = now
            lost = any(t.done == "givenUp" for t in tries)
            status, reason = ("False", "GivenUp") if lost else ("True", "Delivered")
            message = f"{o.event.type} ({o.event.id}): {len(record['delivered'])} sinks received it"
        else:
            status = "False"
            reason = "KeyMissing" if (o.error() or "").startswith("KeyMissing") else "Retrying"
            message = f"{o.event.type} ({o.event.id}): {o.error()}"
        conditions = set_condition(o.conditions, "Notified", status, reason, message[:1000], now)
        if o.key[0] == "job":
            body = Notified.model_validate(record).to_api()
            patch = {"notified": body, "conditions": [c.to_api() for c in conditions]}
            self.store.patch_job_status(o.key[1], o.key[2], None, patch)
        else:
            fresh = self.store.get_batch(o.key[1], o.key[2])
            if fresh is None:
                raise NotFound(f"Batch {o.key[2]} is gone")
            conditions = set_condition(
                fresh.status.conditions, "Notified", status, reason, message[:1000], now
            )
            body = BatchNotified.model_validate({**record, "items": items}).to_api()
            patch = {"notified": body, "conditions": [c.to_api() for c in conditions]}
            self.store.patch_batch_status(
                o.key[1], o.key[2], fresh.metadata.resource_version, patch
            )
        o.conditions = conditions
        _log.info(
            "notified" if settled else "notify_retrying",
            id=o.event.id,
            object=o.ref.name,
            namespace=o.ref.namespace,
            attempts=o.attempts,
        )

    def _event(self, about: ObjectRef, reason: str, message: str) -> None:
        with contextlib.suppress(ApiError):  # best effort: the status and the log say it too
            self.store.post_event(about, "Warning", reason, message[:1000])
