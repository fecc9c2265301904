"""How transcripts and checkpoints are laid out in ConfigMaps: names, labels, encodings. Pure.

    <job>-a<attempt>          the manifest: what the chunks were cut with, the shards in
                              order with the chunk range each holds, and (once complete) the
                              transcript's summary
    <job>-a<attempt>-<n>      shard n of that attempt: one key per chunk ("c000042"), each a
                              JSON record {"cut": [first, end], "tail": "…",
                              "segments": [[start, end, "text"], …]}

- Segments are stored once, as the engine returned them (times absolute, in seconds), UTF-8
  as is. The plain text is derived when reading (`Transcript.text`).
- A shard holds at most `SHARD_BYTES` of data (well under the 1 MiB a ConfigMap may hold), so
  a transcript of any length fits; a manifest grows by ~60 bytes per shard.
- A manifest's shards may belong to earlier attempts: a resumed attempt references the shards
  of the checkpoint it resumed from, pinned to the chunk range it read (`ShardRef.end`); only
  the attempt's own last shard is open (`end` None) while it works. A complete manifest pins
  every shard.
- Every ConfigMap carries the labels `recall.dev/job`, `recall.dev/job-uid`,
  `recall.dev/attempt` and `recall.dev/store` (`manifest` or `shard`; `chunks` and
  `transcript` name the single-ConfigMap layout of earlier versions, still read).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from recall.media.types import Chunk, Cutting, Segment
from recall.resources import object_name

LABEL_ATTEMPT = "recall.dev/attempt"
LABEL_KIND = "recall.dev/store"
LABEL_JOB_UID = "recall.dev/job-uid"
MANIFEST = "manifest"
SHARD = "shard"
LEGACY_KINDS = ("chunks", "transcript")  # the single-ConfigMap layout of earlier versions
KINDS = (MANIFEST, SHARD, *LEGACY_KINDS)
MANIFEST_KEY = "manifest.json"
FORMAT = 1
SHARD_BYTES = 256 * 1024


def manifest_name(job: str, attempt: int) -> str:
    return object_name(job, f"a{attempt}")


def shard_name(job: str, attempt: int, n: int) -> str:
    return object_name(job, f"a{attempt}-{n}")


def record_key(index: int) -> str:
    return f"c{index:06d}"


def record_index(key: str) -> int | None:
    """The chunk index a shard key stands for, or None for another key."""
    if len(key) > 1 and key[0] == "c" and key[1:].isdigit():
        return int(key[1:])
    return None


def dumps(value: object) -> str:
    """Compact JSON with non-ASCII characters as they are (a Cyrillic letter: 2 bytes, not 6)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def data_bytes(data: dict[str, str]) -> int:
    """What a ConfigMap's data counts against its size limit."""
    return sum(len(k.encode()) + len(v.encode()) for k, v in data.items())


# --- chunk records --------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """One chunk in a shard: its sample range, the signature before its end, its segments."""

    first: int
    end: int
    tail: str
    segments: list[Segment]

    @classmethod
    def of(cls, chunk: Chunk, segments: list[Segment]) -> Record:
        return cls(first=chunk.first, end=chunk.end, tail=chunk.tail, segments=segments)

    def encode(self) -> str:
        return dumps(
            {
                "cut": [self.first, self.end],
                "tail": self.tail,
                "segments": [[round(s.start, 3), round(s.end, 3), s.text] for s in self.segments],
            }
        )

    @classmethod
    def decode(cls, raw: str) -> Record:
        """Raises ValueError when `raw` is not a record."""
        try:
            data = json.loads(raw)
            first, end = (int(v) for v in data["cut"])
            segments = [
                Segment(start=float(s), end=float(e), text=str(t)) for s, e, t in data["segments"]
            ]
            return cls(first=first, end=end, tail=str(data.get("tail", "")), segments=segments)
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not a chunk record: {e}") from None

    @property
    def words(self) -> int:
        return sum(len(s.text.split()) for s in self.segments)


# --- manifests ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShardRef:
    """A shard and the chunks [first, end) a manifest takes from it (end None: still open)."""

    name: str
    first: int
    end: int | None = None


@dataclass(frozen=True)
class Summary:
    """What a complete transcript holds."""

    chunks: int
    duration: float
    engine: str
    words: int
    segments: int


@dataclass(frozen=True)
class Manifest:
    job: str
    attempt: int
    cutting: Cutting | None
    shards: tuple[ShardRef, ...]
    transcript: Summary | None = None

    def references(self) -> set[str]:
        return {s.name for s in self.shards}

    def to_data(self) -> dict[str, str]:
        body: dict[str, Any] = {
            "format": FORMAT,
            "job": self.job,
            "attempt": self.attempt,
            "cutting": self.cutting.to_data() if self.cutting else None,
            "shards": [{"name": s.name, "first": s.first, "end": s.end} for s in self.shards],
            "transcript": None,
        }
        if self.transcript is not None:
            t = self.transcript
            body["transcript"] = {
                "chunks": t.chunks,
                "durationSeconds": t.duration,
                "engine": t.engine,
                "words": t.words,
                "segments": t.segments,
            }
        return {MANIFEST_KEY: dumps(body)}

    @classmethod
    def from_data(cls, data: dict[str, str]) -> Manifest:
        """Raises ValueError when `data` holds no manifest of a known format."""
        raw = data.get(MANIFEST_KEY)
        if raw is None:
            raise ValueError("no manifest")
        try:
            body = json.loads(raw)
            if body.get("format") != FORMAT:
                raise ValueError(f"unknown manifest format {body.get('format')!r}")
            shards = tuple(
                ShardRef(
                    name=str(s["name"]),
                    first=int(s["first"]),
                    end=None if s.get("end") is None else int(s["end"]),
                )
                for s in body["shards"]
            )
            t = body.get("transcript")
            summary = (
                None
                if t is None
                else Summary(
                    chunks=int(t["chunks"]),
                    duration=float(t["durationSeconds"]),
                    engine=str(t["engine"]),
                    words=int(t["words"]),
                    segments=int(t["segments"]),
                )
            )
            cutting = body.get("cutting")
            return cls(
                job=str(body["job"]),
                attempt=int(body["attempt"]),
                cutting=None if cutting is None else Cutting.from_data(cutting),
                shards=shards,
                transcript=summary,
            )
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"malformed manifest: {e}") from None


def pinned(shards: tuple[ShardRef, ...], end: int) -> tuple[ShardRef, ...]:
    """`shards` with the open one (if any) closed at chunk `end`."""
    return tuple(replace(s, end=end) if s.end is None else s for s in shards)


# --- transcripts ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Transcript:
    """A transcript as read back: its segments in order; the text is derived from them."""

    segments: list[Segment]
    duration: float
    engine: str

    @property
    def text(self) -> str:
        return " ".join(s.text.strip() for s in self.segments if s.text.strip())

    @property
    def words(self) -> int:
        return sum(len(s.text.split()) for s in self.segments)

    @classmethod
    def from_legacy(cls, data: dict[str, str]) -> Transcript:
        """A transcript written by earlier versions (one ConfigMap, text and segments)."""
        meta: dict[str, Any] = json.loads(data.get("meta.json", "{}"))
        segments = [Segment.model_validate(s) for s in json.loads(data.get("segments.json", "[]"))]
        return cls(
            segments=segments,
            duration=float(meta.get("duration", 0.0)),
            engine=str(meta.get("engine", "")),
        )
