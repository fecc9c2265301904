"""What the notifier reads and writes: the events objects owe, and their records (DESIGN §4e).

`load_job` and `load_batch` read an object and build the event it owes (`Owed`), for the sinks
that want it (`Sinks`: its own and the cluster's defaults).
`write` is one status write: `status.notified` (id, type, attempts, delivered, givenUp,
lastError, and `time` once settled) and the `Notified` condition; a Batch's record also holds
its items' events as counts and the given-up items as compressed index ranges
(`index.ItemTally.record`), never a list. `Batches` finds a pass's Batches.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from dataclasses import dataclass
from typing import Any, Literal

from recall.base import log
from recall.kube import Api, NotFound, ObjectRef
from recall.operator.notify import events
from recall.operator.notify.state import Owed, Try, holds
from recall.operator.reconcile.record import BatchKey
from recall.resources import set_condition
from recall.resources.batch import Batch, BatchNotified, NotifiedItems
from recall.resources.job import Notified, Sink
from recall.transcripts.outputs import OutputInvalid, output_url

_log = log.get("notify")
# URLs in a record's `delivered` and in its `givenUp` at most (the CRDs' maxItems): an object's
# own sinks (4 at most) and the defaults (`NotifySettings.default_sinks`, 4 at most).
MAX_RECORDED = 8


@dataclass(frozen=True)
class Sinks:
    """The cluster-wide default sinks (their Secrets in `namespace`) beside an object's own."""

    defaults: list[Sink]
    namespace: str

    def tries(self, own: list[Sink] | None, namespace: str, type_: str) -> dict[str, Try]:
        """One `Try` per sink that wants `type_`: the object's own, then the defaults."""
        tries = {s.url: Try(s, namespace) for s in own or [] if s.wants(type_)}
        for s in self.defaults:
            if s.wants(type_):
                tries.setdefault(s.url, Try(s, self.namespace))
        return tries


class Batches:
    """The Batches one pass looks at: those kopf delivered, and any other read once from the
    API server (at start-up the jobs can come before their Batch)."""

    def __init__(self, api: Api, known: dict[BatchKey, Batch]) -> None:
        self.api = api
        self.known = known
        self._read: set[BatchKey] = set()

    def get(self, key: BatchKey) -> Batch | None:
        """The Batch, or None when there is none; raises ApiError (not remembered)."""
        if key not in self.known and key not in self._read:
            batch = self.api.get_batch(*key)
            self._read.add(key)
            if batch is not None:
                self.known[key] = batch
        return self.known.get(key)


def load_job(api: Api, namespace: str, name: str, batches: Batches, sinks: Sinks) -> Owed | None:
    """The event a job owes now (read from the API server); None: not final, settled, unwanted."""
    job = api.get_job(namespace, name)
    if job is None:
        return None
    type_ = events.job_type(job)
    recorded = job.status.notified
    if type_ is None or (recorded is not None and recorded.time is not None):
        return None
    if job.spec.batch_ref:
        batch = batches.get((namespace, job.spec.batch_ref))
        own = batch.spec.notify if batch is not None else None
    else:
        own = job.spec.notify
    tries = sinks.tries(own, namespace, type_)
    if not tries:
        return None
    outputs = []
    if job.spec.output is not None and job.status.published is not None:
        with contextlib.suppress(OutputInvalid):  # none named
            outputs = [output_url(job.spec.output, f, job) for f in job.status.published.formats]
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
    )


def load_batch(api: Api, namespace: str, name: str, sinks: Sinks) -> Owed | None:
    """The event of a complete Batch not settled yet, or None."""
    batch = api.get_batch(namespace, name)
    if batch is None or not batch.status.complete or not holds(batch, sinks.defaults):
        return None
    recorded = batch.status.notified
    tries = sinks.tries(batch.spec.notify, namespace, events.BATCH_COMPLETED)
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
    )


def recorded_urls(o: Owed) -> tuple[list[str], list[str]]:
    """The record's `delivered` and `givenUp` (pure), `MAX_RECORDED` each at most: the sinks
    that acknowledged it before and are no sink of it now (a Batch's sinks changed) are kept
    only while there is room, after the current ones."""
    delivered = sorted(u for u, t in o.tries.items() if t.done == "delivered")
    given_up = sorted(u for u, t in o.tries.items() if t.done == "givenUp")
    stale = sorted({*(o.recorded.delivered if o.recorded else [])} - {*o.tries})
    delivered = sorted([*delivered, *stale][:MAX_RECORDED])
    return delivered, given_up[:MAX_RECORDED]


def write(api: Api, o: Owed, settled: bool, items: NotifiedItems | None, now: dt.datetime) -> None:
    """Write `o`'s record (one status write); raises ApiError (`Invalid`: refused for good)."""
    delivered, given_up = recorded_urls(o)
    record: dict[str, Any] = {
        "id": o.event.id,
        "type": o.event.type,
        "attempts": o.attempts,
        "delivered": delivered,
        "givenUp": given_up,
        "lastError": (o.error() or "")[:1000] or None,
    }
    status: Literal["True", "False"]
    if settled:
        record["time"] = now
        status, reason = ("False", "GivenUp") if record["givenUp"] else ("True", "Delivered")
        message = f"{o.event.type} ({o.event.id}): {len(record['delivered'])} sinks received it"
    else:
        status = "False"
        reason = "KeyMissing" if (o.error() or "").startswith("KeyMissing") else "Retrying"
        message = f"{o.event.type} ({o.event.id}): {o.error()}"
    conditions = set_condition(o.conditions, "Notified", status, reason, message[:1000], now)
    if o.key[0] == "job":
        body = Notified.model_validate(record).to_api()
        patch = {"notified": body, "conditions": [c.to_api() for c in conditions]}
        api.patch_job_status(o.key[1], o.key[2], None, patch)
    else:
        fresh = api.get_batch(o.key[1], o.key[2])
        if fresh is None:
            raise NotFound(f"Batch {o.key[2]} is gone")
        conditions = set_condition(
            fresh.status.conditions, "Notified", status, reason, message[:1000], now
        )
        body = BatchNotified.model_validate({**record, "items": items}).to_api()
        patch = {"notified": body, "conditions": [c.to_api() for c in conditions]}
        api.patch_batch_status(o.key[1], o.key[2], fresh.metadata.resource_version, patch)
    o.conditions = conditions
    _log.info(
        "notified" if settled else "notify_retrying",
        id=o.event.id,
        object=o.ref.name,
        namespace=o.ref.namespace,
        attempts=o.attempts,
    )
