"""What the operator keeps of one TranscriptionJob: a compact `JobRecord`.

A few hundred bytes instead of the whole object (the operator holds 100,000 of them). `from_raw`
reads it from the object as the API server serves it; a field the job lacks takes its CRD
default. Not guaranteed: a record is a copy of one version of the job, current only as long as
the informer's cache (`cache`) keeps it so.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from recall.engines.languages import multilingual_asks
from recall.kube import RawObject
from recall.protocol.observer import JobKey
from recall.resources import DEFAULT_POOL, LABEL_INDEX, LABEL_SUSPENDED, Lease, Part, Phase

BatchKey = tuple[str, str]  # (namespace, batch name)


def _time(value: Any) -> dt.datetime | None:
    if not value:
        return None
    return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def _audio_seconds(result: Any) -> float | None:
    if not isinstance(result, dict) or result.get("durationSeconds") is None:
        return None
    return float(result["durationSeconds"]) * int(result.get("channels") or 1)


def _notified(record: Any) -> str | None:
    if not isinstance(record, dict) or not record.get("time"):
        return None
    return "givenUp" if record.get("givenUp") else "delivered"


@dataclass(slots=True)
class JobRecord:
    """What the operator needs of one job to plan: identity, phase, counters, lease, errors."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    batch: str | None
    item: str | None
    index: int | None
    phase: Phase
    attempts: int
    expired_leases: int
    failures: int
    releases: int
    max_attempts: int
    max_releases: int
    lease: Lease | None
    backoff_seconds: float | None
    offer: str | None
    priority: int
    created: dt.datetime | None
    suspended: bool
    engine: str | None
    pool: str  # the worker pool it belongs to (spec.pool, else the default pool)
    started_at: dt.datetime | None
    completed_at: dt.datetime | None
    error_reason: str | None
    error_message: str | None
    result: str | None  # status.result.transcript: the accepted transcript's key
    parts: tuple[Part, ...]  # the checkpoint: where its chunks are in the results store
    published: bool
    output: bool  # spec.output asks for outputs
    notified: str | None = None  # its event settled: "delivered" or "givenUp"; None: not yet
    notify: bool = False  # spec.notify names sinks (a Batch's job uses the Batch's: see there)
    audio_seconds: float | None = None  # the result's duration × its channels (split)
    language: str | None = None  # status.result.language: the language transcribed
    # what it asks that only a multilingual model does (`engines.languages.multilingual_asks`)
    asks: tuple[str, ...] = ()
    model: str | None = None  # spec.engine.model: a model of its own, loaded when it runs

    @property
    def key(self) -> JobKey:
        return (self.namespace, self.name)

    @property
    def batch_key(self) -> BatchKey | None:
        return (self.namespace, self.batch) if self.batch else None

    @classmethod
    def from_raw(cls, raw: RawObject) -> JobRecord:
        meta = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        status = raw.get("status") or {}
        labels = meta.get("labels") or {}
        index = labels.get(LABEL_INDEX)
        lease = status.get("lease")
        error = status.get("lastError") or {}
        return cls(
            namespace=meta.get("namespace") or "default",
            name=meta["name"],
            uid=meta.get("uid") or "",
            resource_version=str(meta.get("resourceVersion") or ""),
            batch=spec.get("batchRef") or None,
            item=spec.get("item") or None,
            index=int(index) if index and str(index).isdigit() else None,
            phase=Phase(status.get("phase") or "Queued"),
            attempts=int(status.get("attempts") or 0),
            expired_leases=int(status.get("expiredLeases") or 0),
            failures=int(status.get("failures") or 0),
            releases=int(status.get("releases") or 0),
            max_attempts=int(spec.get("maxAttempts") or 5),
            max_releases=int(spec.get("maxReleases", 10)),
            lease=Lease.model_validate(lease) if lease else None,
            backoff_seconds=status.get("backoffSeconds"),
            offer=(status.get("offer") or {}).get("worker"),
            priority=int(spec.get("priority") or 0),
            created=_time(meta.get("creationTimestamp")),
            suspended=labels.get(LABEL_SUSPENDED) == "true",
            engine=(spec.get("engine") or {}).get("name"),
            pool=str(spec.get("pool") or DEFAULT_POOL),
            started_at=_time(status.get("startedAt")),
            completed_at=_time(status.get("completedAt")),
            error_reason=error.get("reason"),
            error_message=error.get("message"),
            result=(status.get("result") or {}).get("transcript"),
            parts=tuple(
                Part.model_validate(p) for p in (status.get("progress") or {}).get("parts") or ()
            ),
            published=status.get("published") is not None,
            output=spec.get("output") is not None,
            notified=_notified(status.get("notified")),
            notify=bool(spec.get("notify")),
            audio_seconds=_audio_seconds(status.get("result")),
            language=(status.get("result") or {}).get("language") or None,
            asks=multilingual_asks(
                spec.get("language"),
                spec.get("languageOptions") or (),
                spec.get("languageScope"),
                (spec.get("transcript") or {}).get("translate"),
            ),
            model=(spec.get("engine") or {}).get("model") or None,
        )

    @property
    def attempts_left(self) -> int:
        """Claims the job may still take (`lease.Budget.left`)."""
        return self.max_attempts + min(self.releases, self.max_releases) - self.attempts

    @property
    def claimable(self) -> bool:
        """Queued and claimable now by what the operator sees (offered or not)."""
        return (
            self.phase is Phase.QUEUED
            and self.backoff_seconds is None
            and not self.suspended
            and self.attempts_left > 0
        )

    @property
    def to_publish(self) -> bool:
        """Succeeded, and its outputs and index entry not recorded as written yet."""
        return self.phase is Phase.SUCCEEDED and not self.published
