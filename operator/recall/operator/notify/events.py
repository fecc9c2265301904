"""The events (docs/notify.md): their types, stable ids and data. Pure.

| type | when (from which object) |
| --- | --- |
| `dev.recall.job.succeeded` | a job without a Batch succeeded, its result published |
| `dev.recall.job.failed` | a job without a Batch failed |
| `dev.recall.batch.item.succeeded` | a Batch's item succeeded, its result published (its job) |
| `dev.recall.batch.item.failed` | a Batch's item failed (its job) |
| `dev.recall.batch.completed` | every item of the Batch is final and published (the Batch) |

A cancelled job sends nothing. An event's id is a hash of its object's uid and type, the same
on every try, replica and restart, so a receiver drops a repeat by its id. Its `time` is when
the object finished, read from its record (never the clock), so a retry's body is the same
bytes. The data names the object, the item, the Batch, where the result is (its keys and the
published outputs) and the counts; never the transcript's text (redacted or not), so an event
holds nothing `redact` keeps out of the bucket.

CloudEvents 1.0, structured JSON mode (`application/cloudevents+json`), via the `cloudevents` SDK.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass
from typing import Any

from cloudevents.core.bindings.http import to_structured
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent

from recall.resources import API_VERSION, BATCH_PLURAL, JOB_PLURAL
from recall.resources.batch import Batch, Counts
from recall.resources.job import Phase, TranscriptionJob

JOB_SUCCEEDED = "dev.recall.job.succeeded"
JOB_FAILED = "dev.recall.job.failed"
ITEM_SUCCEEDED = "dev.recall.batch.item.succeeded"
ITEM_FAILED = "dev.recall.batch.item.failed"
BATCH_COMPLETED = "dev.recall.batch.completed"
CONTENT_TYPE = "application/cloudevents+json"
MAX_MESSAGE = 500  # an error message in an event, at most


@dataclass(frozen=True)
class Event:
    """One event, ready to send: its id and type, and the structured-mode body."""

    id: str
    type: str
    body: bytes


def event_id(uid: str, type_: str) -> str:
    """The event's id: the same for every try of the same event."""
    return hashlib.sha256(f"{uid}/{type_}".encode()).hexdigest()[:32]


def job_type(job: TranscriptionJob) -> str | None:
    """The type of the event `job` owes now, or None (not final, cancelled, or a Succeeded
    job whose result is not published yet: its outputs are named only once they exist)."""
    phase = job.status.effective_phase
    item = bool(job.spec.batch_ref)
    if phase is Phase.SUCCEEDED and job.status.published is not None:
        return ITEM_SUCCEEDED if item else JOB_SUCCEEDED
    if phase is Phase.FAILED:
        return ITEM_FAILED if item else JOB_FAILED
    return None


def _source(namespace: str, plural: str, name: str) -> str:
    return f"/apis/{API_VERSION}/namespaces/{namespace}/{plural}/{name}"


def _time(*candidates: dt.datetime | None) -> dict[str, dt.datetime]:
    """The first of `candidates` that is set; none: no `time` (CloudEvents allows that)."""
    when = next((c for c in candidates if c is not None), None)
    return {"time": when} if when is not None else {}


def build(attributes: dict[str, Any], data: dict[str, Any]) -> bytes:
    """The structured-mode body of a CloudEvent 1.0 (the SDK's JSON format)."""
    attrs = {"specversion": "1.0", "datacontenttype": "application/json", **attributes}
    return to_structured(CloudEvent(attrs, data), JSONFormat()).body


def job_event(job: TranscriptionJob, type_: str, outputs: list[str]) -> Event:
    """The event of a finished job (`outputs`: the URLs its result was published to)."""
    status = job.status
    data: dict[str, Any] = {
        "namespace": job.namespace,
        "job": job.name,
        "uid": job.metadata.uid,
        "phase": status.effective_phase.value,
        "attempts": status.attempts,
    }
    if job.spec.batch_ref:
        data["batch"] = job.spec.batch_ref
        data["item"] = job.spec.item
    if status.result is not None:
        r = status.result
        data["result"] = {
            k: v
            for k, v in {
                "transcript": r.transcript,
                "words": r.words,
                "durationSeconds": r.duration_seconds,
                "language": r.language,
                "engine": r.engine,
                "model": r.model,
            }.items()
            if v is not None
        }
    if status.published is not None:
        data["outputs"] = outputs
        if status.published.index:
            data["index"] = status.published.index
    if status.last_error is not None and status.effective_phase is Phase.FAILED:
        e = status.last_error
        data["error"] = {"reason": e.reason, "message": (e.message or "")[:MAX_MESSAGE]}
    eid = event_id(job.metadata.uid or job.name, type_)
    attrs = {
        "id": eid,
        "type": type_,
        "source": _source(job.namespace, JOB_PLURAL, job.name),
        "subject": job.spec.item or job.name,
        **_time(status.completed_at, job.metadata.creation_timestamp),
    }
    return Event(eid, type_, build(attrs, data))


def batch_event(batch: Batch) -> Event:
    """The `dev.recall.batch.completed` event of a complete Batch, with its counts."""
    status = batch.status
    counts = status.counts or Counts()
    data: dict[str, Any] = {
        "namespace": batch.namespace,
        "batch": batch.name,
        "uid": batch.metadata.uid,
        "counts": {k: getattr(counts, k) for k in ("total", "completed", "failed", "cancelled")},
    }
    if status.failed_indexes:
        data["failedIndexes"] = status.failed_indexes
    if status.cancelled_indexes:
        data["cancelledIndexes"] = status.cancelled_indexes
    eid = event_id(batch.metadata.uid or batch.name, BATCH_COMPLETED)
    complete = next((c for c in status.conditions if c.type == "Complete"), None)
    attrs = {
        "id": eid,
        "type": BATCH_COMPLETED,
        "source": _source(batch.namespace, BATCH_PLURAL, batch.name),
        "subject": batch.name,
        **_time(
            status.completed_at,
            complete.last_transition_time if complete else None,
            batch.metadata.creation_timestamp,
        ),
    }
    return Event(eid, BATCH_COMPLETED, build(attrs, data))
