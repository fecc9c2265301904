"""The Batch resource: a list of media items (spec) and the operator's projection of their
jobs (status), whose size does not grow with the number of items."""

from __future__ import annotations

import datetime as dt
from enum import StrEnum

from pydantic import Field

from recall.resources.common import Condition, Model, Resource, is_true
from recall.resources.job import (
    EngineSpec,
    LanguageScope,
    Notified,
    Output,
    Phase,
    Sink,
    Source,
    TranscriptSpec,
)

MAX_ATTENTION = 50


class ItemPhase(StrEnum):
    """Phase of one Batch item (lower case: it is a projection, not a job phase)."""

    QUEUED = "queued"
    TRANSCRIBING = "transcribing"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (ItemPhase.COMPLETED, ItemPhase.FAILED, ItemPhase.CANCELLED)


ITEM_PHASE_OF_JOB: dict[Phase, ItemPhase] = {
    Phase.QUEUED: ItemPhase.QUEUED,
    Phase.LEASED: ItemPhase.TRANSCRIBING,
    Phase.SUCCEEDED: ItemPhase.COMPLETED,
    Phase.FAILED: ItemPhase.FAILED,
    Phase.CANCELLED: ItemPhase.CANCELLED,
}


class BatchItem(Model):
    key: str
    source: Source
    language: str | None = None
    priority: int | None = None


class ItemList(Model):
    """A list of items kept in a ConfigMap: one item per line, `URL` or `KEY URL`."""

    config_map: str
    key: str = "items"


class JobDefaults(Model):
    language: str | None = None
    language_options: list[str] | None = None
    language_scope: LanguageScope | None = None
    engine: EngineSpec | None = None
    pool: str | None = None
    lease_duration_seconds: int = 120
    checkpoint_seconds: float | None = None
    max_attempts: int = 5
    max_releases: int = 10
    priority: int = 0
    output: Output | None = None
    transcript: TranscriptSpec | None = None
    vocabulary: list[str] | None = None


class BatchSpec(Model):
    items: list[BatchItem] = Field(default_factory=list)
    items_from: list[ItemList] = Field(default_factory=list)
    defaults: JobDefaults = Field(default_factory=JobDefaults)
    ttl_seconds_after_finished: int | None = None
    suspend: bool = False
    notify: list[Sink] | None = None


class Counts(Model):
    total: int = 0
    queued: int = 0
    transcribing: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    published: int = 0

    @property
    def done(self) -> int:
        return self.completed + self.failed + self.cancelled


class Attention(Model):
    """One item that needs a look: failed, retried, reclaimed, or without its job."""

    index: int
    key: str
    phase: ItemPhase
    job: str | None = None
    attempts: int | None = None
    expired_leases: int | None = None
    reason: str | None = None
    message: str | None = None


class NotifiedItems(Model):
    """The item events of a Batch as counts and compressed index ranges."""

    delivered: int = 0
    given_up: int = 0
    pending: int = 0
    given_up_indexes: str | None = None


class BatchNotified(Notified):
    """The Batch's own event (`dev.recall.batch.completed`) and its items' events."""

    items: NotifiedItems | None = None


class BatchStatus(Model):
    operator_term: int | None = None
    observed_generation: int | None = None
    counts: Counts | None = None
    transcribing_indexes: str | None = None
    completed_indexes: str | None = None
    failed_indexes: str | None = None
    cancelled_indexes: str | None = None
    indexes_truncated: bool | None = None
    attention: list[Attention] = Field(default_factory=list)
    progress: str | None = None
    eta: dt.datetime | None = None
    started_at: dt.datetime | None = None
    completed_at: dt.datetime | None = None
    expired_leases: int | None = None
    failures: int | None = None
    heals: int | None = None
    languages: dict[str, int] | None = None
    notified: BatchNotified | None = None
    conditions: list[Condition] = Field(default_factory=list)

    @property
    def complete(self) -> bool:
        return is_true(self.conditions, "Complete")


class Batch(Resource):
    kind: str = "Batch"
    spec: BatchSpec
    status: BatchStatus = Field(default_factory=BatchStatus)
