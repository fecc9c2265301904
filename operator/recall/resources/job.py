"""The TranscriptionJob resource: what to transcribe (spec) and the lease ledger (status)."""

from __future__ import annotations

import datetime as dt
from enum import StrEnum
from typing import Literal

from pydantic import Field

from recall.resources.common import LABEL_SUSPENDED, Condition, Model, Resource

DEFAULT_POOL = "default"  # the pool of a job that names none


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


class Source(Model):
    url: str


class SimulateSpec(Model):
    chunks: int | None = None
    chunk_delay_seconds: float | None = None
    block_seconds: float | None = None
    failure: Literal["retriable", "permanent"] | None = None
    fail_at_chunk: int | None = None
    fail_attempts: int | None = None


EngineName = Literal["whisper", "openai", "simulated"]


class EngineSpec(Model):
    name: EngineName | None = None
    model: str | None = None
    chunk_seconds: int | None = None
    simulate: SimulateSpec | None = None


Format = Literal["json", "aws.json", "srt", "vtt", "txt"]
FORMATS: tuple[Format, ...] = ("json", "aws.json", "srt", "vtt", "txt")
# The outputs a job writes: its formats, and the English translation's (`transcript.translate`).
OutputFormat = Literal["json", "aws.json", "srt", "vtt", "txt", "en.srt", "en.vtt", "en.txt"]
AUTO = "auto"  # spec.language: detect the language once per file (a multilingual model)
# A detected language less likely than this gets the job's LanguageUncertain condition.
LOW_LANGUAGE_PROBABILITY = 0.5
LanguageScope = Literal["file", "segment"]  # spec.languageScope: one language a file, or a segment
Translate = Literal["en"]  # spec.transcript.translate: the language translated into


class SubtitleSpec(Model):
    """How SRT and VTT cues are built; empty fields take the usual defaults
    (`recall.transcripts.subtitles.Rules`)."""

    max_line_characters: int | None = None
    max_lines: int | None = None
    max_cue_seconds: float | None = None
    min_cue_seconds: float | None = None
    min_gap_seconds: float | None = None


MAX_SPEAKERS = 20  # speakers.count, min and max at most (the CRD's bound)


class SpeakerSpec(Model):
    """Speaker labels: `{}` finds the count from the audio, `count` fixes it, `min`/`max`
    bound it (the CRD refuses count with min or max, and min > max)."""

    count: int | None = None
    min: int | None = None
    max: int | None = None


Channels = Literal["mixed", "split"]
RedactType = Literal["email", "phone", "card", "iban", "nationalId"]
REDACT_TYPES: tuple[RedactType, ...] = ("email", "phone", "card", "iban", "nationalId")


class RedactSpec(Model):
    """What is redacted before anything is written, and what is kept besides."""

    types: list[RedactType]
    audio: bool | None = None
    keep_original: bool | None = None


class TranscriptSpec(Model):
    """What the transcript holds besides segments: word timings, speakers, channels, what it
    leaves out (redact), and the subtitle rules."""

    words: bool | None = None
    subtitles: SubtitleSpec | None = None
    speakers: SpeakerSpec | None = None
    channels: Channels | None = None
    redact: RedactSpec | None = None
    translate: Translate | None = None

    @property
    def split(self) -> bool:
        """Whether each channel is transcribed on its own (`channels: split`)."""
        return self.channels == "split"

    @property
    def needs_words(self) -> bool:
        """Whether an engine keeps every word's times: asked for, or needed for speakers and
        redaction (the outputs show them only when asked)."""
        return bool(self.words or self.speakers is not None or self.redact is not None)


def _json_only() -> list[Format]:
    return ["json"]


class Output(Model):
    """Where the accepted transcript is published: `url` with its placeholders, per format."""

    url: str
    formats: list[Format] = Field(default_factory=_json_only)


NotifyType = Literal[
    "dev.recall.job.succeeded",
    "dev.recall.job.failed",
    "dev.recall.batch.item.succeeded",
    "dev.recall.batch.item.failed",
    "dev.recall.batch.completed",
]


class SecretKeyRef(Model):
    """A key of a Secret in the object's namespace."""

    name: str
    key: str


class Sink(Model):
    """Where CloudEvents go (docs/notify.md): an HTTP(S) URL, the types it wants (none: all),
    and the Secret key that signs them."""

    url: str
    types: list[NotifyType] | None = None
    secret_ref: SecretKeyRef

    def wants(self, type_: str) -> bool:
        return not self.types or type_ in self.types


class Notified(Model):
    """The operator's record of an event's delivery: written at the first failed try and once
    the event is settled (`time`: delivered to, or given up by, every sink)."""

    id: str
    type: str | None = None
    attempts: int = 0
    delivered: list[str] = Field(default_factory=list)
    given_up: list[str] = Field(default_factory=list)
    last_error: str | None = None
    time: dt.datetime | None = None


class JobSpec(Model):
    source: Source
    language: str | None = None
    language_options: list[str] | None = None
    language_scope: LanguageScope | None = None
    engine: EngineSpec | None = None
    output: Output | None = None
    transcript: TranscriptSpec | None = None
    vocabulary: list[str] | None = None
    notify: list[Sink] | None = None
    batch_ref: str | None = None
    item: str | None = None
    pool: str | None = None
    lease_duration_seconds: int = 120
    checkpoint_seconds: float | None = None
    max_attempts: int = 5
    max_releases: int = 10
    priority: int = 0


class Lease(Model):
    holder: str
    token: str
    acquire_time: dt.datetime
    renew_time: dt.datetime
    duration_seconds: int


class Offer(Model):
    worker: str


class Part(Model):
    """Chunks [first, end) that one attempt stored, under its own keys in the results store."""

    attempt: int
    token: str
    first: int
    end: int


class Progress(Model):
    chunks_done: int = 0
    chunks_total: int = 0
    parts: list[Part] = Field(default_factory=list)
    summary: str | None = None

    @classmethod
    def of(cls, done: int, total: int, parts: list[Part] | None = None) -> Progress:
        return cls(
            chunks_done=done, chunks_total=total, parts=parts or [], summary=f"{done}/{total}"
        )


class Result(Model):
    transcript: str
    token: str | None = None
    attempt: int | None = None
    worker: str | None = None
    engine: str | None = None
    words: int | None = None
    duration_seconds: float | None = None
    model: str | None = None
    model_digest: str | None = None
    language: str | None = None
    language_probability: float | None = None
    device: str | None = None
    compute_type: str | None = None
    channels: int | None = None  # transcribed on their own, with `channels: split`
    speakers: int | None = None  # voices found and labelled, with `transcript.speakers`
    speakers_asked: int | None = None  # the count (or min) asked, when fewer were found


class JobError(Model):
    reason: str
    message: str | None = None
    permanent: bool | None = None
    attempt: int | None = None
    time: dt.datetime | None = None


class Published(Model):
    """The operator's one record, on a Succeeded job, that its result was published."""

    time: dt.datetime
    formats: list[OutputFormat] = Field(default_factory=list)
    index: str | None = None
    audio: str | None = None


class JobStatus(Model):
    phase: Phase | None = None
    lease: Lease | None = None
    fence: str | None = None
    offer: Offer | None = None
    attempts: int = 0
    expired_leases: int = 0
    failures: int = 0
    releases: int = 0
    backoff_seconds: float | None = None
    started_at: dt.datetime | None = None
    completed_at: dt.datetime | None = None
    progress: Progress | None = None
    result: Result | None = None
    published: Published | None = None
    notified: Notified | None = None
    last_error: JobError | None = None
    conditions: list[Condition] = Field(default_factory=list)

    @property
    def effective_phase(self) -> Phase:
        """An absent phase means Queued: a job nobody has touched yet."""
        return self.phase or Phase.QUEUED


class TranscriptionJob(Resource):
    kind: str = "TranscriptionJob"
    spec: JobSpec
    status: JobStatus = Field(default_factory=JobStatus)

    @property
    def pool(self) -> str:
        """The worker pool the job belongs to (`spec.pool`; none: the pool named default)."""
        return self.spec.pool or DEFAULT_POOL

    @property
    def suspended(self) -> bool:
        return self.metadata.labels.get(LABEL_SUSPENDED) == "true"
