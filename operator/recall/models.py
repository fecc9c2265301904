"""Typed models of the two custom resources, TranscriptionJob and Batch.

Contract: the field names (camelCase aliases), types and enums match the CRD schemas in
`crds/` exactly; `tests/unit/test_models_match_crds.py` walks both and fails on any
difference. Models are frozen: a state change produces a new object (`model_copy`).
`to_api()` dumps the Kubernetes form (aliases, no unset fields); `from_api()` validates a
dict read from the API server, ignoring metadata it does not model.
"""

from __future__ import annotations

import datetime as dt
from enum import StrEnum
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

GROUP = "recall.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
JOB_PLURAL = "transcriptionjobs"
BATCH_PLURAL = "batches"

LABEL_BATCH = "recall.dev/batch"
LABEL_ITEM = "recall.dev/item"
LABEL_JOB = "recall.dev/job"
LABEL_SUSPENDED = "recall.dev/suspended"
LABEL_COMPONENT = "app.kubernetes.io/component"


class Model(BaseModel):
    """Base: camelCase aliases, frozen, unknown fields ignored (the API server may add some)."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="ignore"
    )

    def to_api(self) -> dict[str, Any]:
        """The Kubernetes JSON form: aliases, unset and None fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class Phase(StrEnum):
    """Phase of a TranscriptionJob."""

    QUEUED = "Queued"
    LEASED = "Leased"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"

    @property
    def terminal(self) -> bool:
        return self in (Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED)


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


# --- TranscriptionJob ---------------------------------------------------------------------


class Source(Model):
    url: str


class SimulateSpec(Model):
    chunks: int | None = None
    chunk_delay_seconds: float | None = None
    block_seconds: float | None = None
    failure: Literal["retriable", "permanent"] | None = None
    fail_at_chunk: int | None = None
    fail_attempts: int | None = None


class EngineSpec(Model):
    name: Literal["whisper", "openai", "simulated"] | None = None
    model: str | None = None
    chunk_seconds: int | None = None
    simulate: SimulateSpec | None = None


class JobSpec(Model):
    source: Source
    language: str | None = None
    engine: EngineSpec | None = None
    batch_ref: str | None = None
    item: str | None = None
    lease_duration_seconds: int = 120
    max_attempts: int = 5
    priority: int = 0


class Lease(Model):
    holder: str
    token: str
    acquire_time: dt.datetime
    renew_time: dt.datetime
    duration_seconds: int


class Progress(Model):
    chunks_done: int = 0
    chunks_total: int = 0
    checkpoint: str | None = None
    summary: str | None = None

    @classmethod
    def of(cls, done: int, total: int, checkpoint: str | None = None) -> Progress:
        return cls(
            chunks_done=done, chunks_total=total, checkpoint=checkpoint, summary=f"{done}/{total}"
        )


class Result(Model):
    config_map: str
    attempt: int | None = None
    worker: str | None = None
    engine: str | None = None
    words: int | None = None
    duration_seconds: float | None = None


class JobError(Model):
    reason: str
    message: str | None = None
    permanent: bool | None = None
    attempt: int | None = None
    time: dt.datetime | None = None


class Condition(Model):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str | None = None
    message: str | None = None
    last_transition_time: dt.datetime


def is_complete(conditions: list[Condition]) -> bool:
    """True when the Complete condition is True: every item finished."""
    return any(c.type == "Complete" and c.status == "True" for c in conditions)


class JobStatus(Model):
    phase: Phase | None = None
    lease: Lease | None = None
    attempts: int = 0
    expired_leases: int = 0
    failures: int = 0
    releases: int = 0
    not_before: dt.datetime | None = None
    started_at: dt.datetime | None = None
    completed_at: dt.datetime | None = None
    progress: Progress | None = None
    result: Result | None = None
    last_error: JobError | None = None
    conditions: list[Condition] = Field(default_factory=list)

    @property
    def effective_phase(self) -> Phase:
        """An absent phase means Queued: a job nobody has touched yet."""
        return self.phase or Phase.QUEUED


class ObjectMeta(Model):
    """The metadata fields the project reads; everything else is ignored."""

    name: str
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: dt.datetime | None = None
    deletion_timestamp: dt.datetime | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class Resource(Model):
    """What both custom resources share: identity and the way they are read from the API."""

    api_version: str = API_VERSION
    kind: str
    metadata: ObjectMeta

    @classmethod
    def from_api(cls, obj: dict[str, Any]) -> Self:
        return cls.model_validate(obj)

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or "default"


class TranscriptionJob(Resource):
    kind: str = "TranscriptionJob"
    spec: JobSpec
    status: JobStatus = Field(default_factory=JobStatus)

    @property
    def resource_version(self) -> str:
        rv = self.metadata.resource_version
        if rv is None:
            raise ValueError(f"{self.name}: object has no resourceVersion (not read from the API)")
        return rv

    @property
    def suspended(self) -> bool:
        return self.metadata.labels.get(LABEL_SUSPENDED) == "true"


# --- Batch --------------------------------------------------------------------------------


class BatchItem(Model):
    key: str
    source: Source
    language: str | None = None
    priority: int | None = None


class JobDefaults(Model):
    language: str | None = None
    engine: EngineSpec | None = None
    lease_duration_seconds: int = 120
    max_attempts: int = 5
    priority: int = 0


class BatchSpec(Model):
    items: list[BatchItem]
    defaults: JobDefaults = Field(default_factory=JobDefaults)
    suspend: bool = False


class ItemStatus(Model):
    phase: ItemPhase
    job: str | None = None
    attempts: int | None = None
    expired_leases: int | None = None
    message: str | None = None


class Counts(Model):
    total: int = 0
    queued: int = 0
    transcribing: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0


class BatchStatus(Model):
    observed_generation: int | None = None
    items: dict[str, ItemStatus] = Field(default_factory=dict)
    counts: Counts | None = None
    progress: str | None = None
    eta: dt.datetime | None = None
    started_at: dt.datetime | None = None
    completed_at: dt.datetime | None = None
    expired_leases: int | None = None
    failures: int | None = None
    heals: int | None = None
    conditions: list[Condition] = Field(default_factory=list)

    @property
    def complete(self) -> bool:
        return is_complete(self.conditions)


class Batch(Resource):
    kind: str = "Batch"
    spec: BatchSpec
    status: BatchStatus = Field(default_factory=BatchStatus)


def set_condition(
    conditions: list[Condition],
    type_: str,
    status: Literal["True", "False", "Unknown"],
    reason: str,
    message: str,
    now: dt.datetime,
) -> list[Condition]:
    """Conditions with `type_` set; lastTransitionTime moves only when the status changes."""
    out: list[Condition] = []
    found = False
    for c in conditions:
        if c.type != type_:
            out.append(c)
            continue
        found = True
        moved = c.status != status
        out.append(
            Condition(
                type=type_,
                status=status,
                reason=reason,
                message=message,
                last_transition_time=now if moved else c.last_transition_time,
            )
        )
    if not found:
        out.append(
            Condition(
                type=type_, status=status, reason=reason, message=message, last_transition_time=now
            )
        )
    return out
