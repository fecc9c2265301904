"""What the notifier keeps in memory of the events owed, and the pure tests of what is owed.

`Owed` is one event and its `Try` per sink; `Gate` is one sink's health (shared by every event
to it); `owes`, `wanted`, `item_types` and `holds` are the pure tests of what is owed, from a
job's record and a Batch. Nothing here calls the API.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from recall.base.backoff import Backoff
from recall.kube import ObjectRef
from recall.operator.notify import events
from recall.operator.notify.transport import Answer, Outcome
from recall.operator.reconcile.record import JobRecord
from recall.resources import Phase
from recall.resources.batch import Batch
from recall.resources.job import Notified, Sink

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
    sent: float = float("-inf")  # when last sent (monotonic)
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
    failed: float = float("-inf")  # when its last failure was counted (monotonic)


@dataclass
class Pass:
    loaded: int = 0
    sent: int = 0
    recorded: int = 0
    given_up: int = 0
    skipped: int = 0  # finished jobs no sink wants: never read
    errors: list[str] = field(default_factory=list)


def holds(batch: Batch, defaults: Iterable[Sink]) -> bool:
    """Whether `batch`'s TTL must wait for its events (pure): it wants events (it has a sink,
    its own or a default) and their record is not settled yet."""
    settled = batch.status.notified is not None and batch.status.notified.time is not None
    return (bool(batch.spec.notify) or any(True for _ in defaults)) and not settled


def item_types(batch: Batch | None, defaults: Iterable[Sink]) -> tuple[str, ...]:
    """The item event types (`ITEM_TYPES`) some sink of `batch` (its own or a default) wants
    (pure): an item whose event is of another type owes nothing, and does not hold the Batch's
    record or its deletion."""
    own = (batch.spec.notify if batch is not None else None) or []
    sinks = [*own, *defaults]
    return tuple(t for t in ITEM_TYPES if any(s.wants(t) for s in sinks))


def event_type(record: JobRecord) -> str:
    """The type of the event a final job owes (pure): an item's or a job's, failed or not."""
    item = record.batch is not None
    if record.phase is Phase.FAILED:
        return events.ITEM_FAILED if item else events.JOB_FAILED
    return events.ITEM_SUCCEEDED if item else events.JOB_SUCCEEDED


def wanted(record: JobRecord, batch: Batch | None, defaults: Iterable[Sink]) -> bool:
    """Whether a sink may want the event `record` owes (pure): a default sink wanting its
    type, its Batch's sinks (`batch`, None when gone), or its own `spec.notify`. False: nothing
    to read or send. A job's own sinks are only known to exist (the record keeps no types):
    whether they want its type is read once, at load (the notifier remembers that version)."""
    type_ = event_type(record)
    item = record.batch is not None
    own = (batch.spec.notify or []) if item and batch is not None else []
    return any(s.wants(type_) for s in [*own, *defaults]) or (not item and record.notify)


def owes(record: JobRecord) -> bool:
    """Whether a job's event may be owed: final, published when Succeeded, not settled."""
    if record.notified is not None:
        return False
    return record.phase is Phase.FAILED or (record.phase is Phase.SUCCEEDED and record.published)


def answered(
    t: Try, gate: Gate, answer: Answer, mono: float, backoff: Backoff, max_refusals: int
) -> bool:
    """Apply a try's `answer` to it and its sink's gate (pure); True when the event is given
    up for this sink. Unavailable: the whole sink backs off (Retry-After honoured to the cap);
    refused: this event retries with backoff, `max_refusals` times. No delay, jitter included,
    is longer than `backoff.cap`. A sink's failure counts once however many tries were in
    flight: one sent before its last counted failure adds none."""
    t.busy = False
    t.attempts += 1
    if answer.outcome is Outcome.DELIVERED:
        t.done, t.error = "delivered", None
        gate.failures, gate.at = 0, float("-inf")
        return False
    t.error = answer.error
    if answer.outcome is Outcome.UNAVAILABLE:
        retry_after = min(answer.retry_after or 0, backoff.cap)
        if t.sent > gate.failed:  # a failure of its own, not one more answer of the same burst
            delay = min(backoff.delay(gate.failures), backoff.cap)  # jitter never passes the cap
            gate.failures, gate.failed = gate.failures + 1, mono
            gate.at = mono + max(delay, retry_after)
        else:
            gate.at = max(gate.at, mono + retry_after)
        t.at = gate.at
        return False
    t.refusals += 1
    gate.failures, gate.at = 0, float("-inf")  # it answers: not a sink failure
    if t.refusals >= max_refusals:
        t.done = "givenUp"
        return True
    t.at = mono + min(backoff.delay(t.refusals - 1), backoff.cap)
    return False


def signing_keys(data: dict[str, bytes] | None, t: Try) -> list[bytes] | str:
    """The keys of `t`'s sink in its Secret's `data` (the key, and `<key>.next` while one is
    rotated), or why there are none: nothing is ever sent unsigned."""
    ref = t.sink.secret_ref
    if data is None:
        return f"KeyMissing: Secret {t.secrets}/{ref.name} does not exist"
    if not data.get(ref.key):
        return f"KeyMissing: Secret {t.secrets}/{ref.name} has no key {ref.key}"
    return [data[k] for k in (ref.key, f"{ref.key}.next") if data.get(k)]
