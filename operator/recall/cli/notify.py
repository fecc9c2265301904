"""`recall notify resend` and `recall usage`: what the operator's events and usage records hold.

- `resend(store, namespace, "job/NAME" | "batch/NAME")` clears the given-up sinks of a settled
  `status.notified` (a Batch: its own and its items'); the leading operator then sends those
  events again, with their ids (docs/notify.md). One status write per record.
- `usage(store, namespaces, since, until)` sums the per-day figures of each namespace's
  `recall-usage` ConfigMap (written by the operator, `recall.operator.usage`).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import dataclass

from recall.cli.listing import BATCH_KINDS, job_pages
from recall.kube import Api, Selector
from recall.operator.usage import CONFIG_MAP as USAGE_CONFIG_MAP
from recall.resources import LABEL_BATCH, TranscriptionJob, label_value

RESEND = {"time": None, "givenUp": None}  # a merge patch: unsettled, nothing given up


def resend(store: Api, namespace: str, ref: str) -> list[str]:
    """Mark the given-up events of `ref` (job/NAME or batch/NAME) to be sent again; returns
    what was marked. Raises LookupError for a bad reference or a missing object."""
    kind, _, name = ref.partition("/")
    if kind in ("job", "jobs", "tj", "transcriptionjob"):
        job = store.get_job(namespace, name)
        if job is None:
            raise LookupError(f"TranscriptionJob {namespace}/{name} not found")
        return [f"job/{name}"] if _resend_job(store, job) else []
    if kind not in BATCH_KINDS:
        raise LookupError(f"{ref}: name job/NAME or batch/NAME")
    batch = store.get_batch(namespace, name)
    if batch is None:
        raise LookupError(f"Batch {namespace}/{name} not found")
    marked = [
        f"job/{job.name}" for job in _jobs_of(store, namespace, name) if _resend_job(store, job)
    ]
    record = batch.status.notified
    if record is not None and (record.given_up or marked):
        store.patch_batch_status(namespace, name, None, {"notified": RESEND})
        marked.append(f"batch/{name}")
    return marked


def gone(store: Api, namespace: str, ref: str) -> int:
    """How many of a Batch's given-up item events cannot be sent again: the Batch's TTL deleted
    their jobs, which the events and their ids are built from (the Batch's record keeps only a
    count and index ranges). 0 for a job, or a Batch whose given-up items' jobs all exist."""
    kind, _, name = ref.partition("/")
    batch = store.get_batch(namespace, name) if kind in BATCH_KINDS else None
    record = batch.status.notified if batch is not None else None
    if record is None or record.items is None or not record.items.given_up:
        return 0
    kept = sum(1 for job in _jobs_of(store, namespace, name) if _given_up(job))
    return max(0, record.items.given_up - kept)


def _jobs_of(store: Api, namespace: str, batch: str) -> Iterator[TranscriptionJob]:
    selector = Selector(labels=f"{LABEL_BATCH}={label_value(batch)}")
    for page in job_pages(store, namespace, selector):
        yield from (TranscriptionJob.from_api(raw) for raw in page)


def _given_up(job: TranscriptionJob) -> bool:
    record = job.status.notified
    return record is not None and record.time is not None and bool(record.given_up)


def _resend_job(store: Api, job: TranscriptionJob) -> bool:
    if not _given_up(job):
        return False
    store.patch_job_status(job.namespace, job.name, job.resource_version, {"notified": RESEND})
    return True


@dataclass
class Usage:
    namespace: str
    jobs: int = 0
    audio_seconds: float = 0.0
    engine_seconds: float = 0.0


def usage(
    store: Api, namespaces: list[str], since: dt.date | None, until: dt.date | None
) -> list[Usage]:
    """Each namespace's usage over the days from `since` to `until` (both included)."""
    rows = []
    for namespace in namespaces:
        row = Usage(namespace)
        cm = store.get_config_map(namespace, USAGE_CONFIG_MAP)
        for day, text in (cm.data if cm else {}).items():
            try:
                date = dt.date.fromisoformat(day)
                figures = json.loads(text)
            except ValueError:
                continue
            if (since and date < since) or (until and date > until):
                continue
            row.jobs += int(figures.get("jobs", 0))
            row.audio_seconds += float(figures.get("audioSeconds", 0.0))
            row.engine_seconds += float(figures.get("engineSeconds", 0.0))
        rows.append(row)
    return rows
