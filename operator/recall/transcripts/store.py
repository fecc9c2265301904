"""Reading and writing transcripts and checkpoints in a job's ConfigMaps (layout: `layout`).

Contract:
- `TranscriptWriter` is one attempt's writer: `begin` writes the manifest (before any paid
  call, so a store that refuses is found out first), `add` stores one chunk (one merge patch
  of the open shard; a new shard and a manifest update when the open one is full), `finish`
  pins every shard and records the summary: the manifest then is the transcript, and its
  name is what `complete` references. Every write is idempotent, so a caller may repeat one
  whose answer was lost. The writer's state changes only after its writes succeeded.
- Errors of the store propagate unchanged (`Unavailable` is worth repeating; `Invalid`,
  `Forbidden`, `TooLarge` are not). A chunk whose record alone exceeds a shard raises
  `JobFailure("TranscriptRefused", permanent=True)`.
- `read_checkpoint` returns what a resumed attempt may reuse: the chunks stored contiguously
  from the first, each continuing exactly where the previous one ended, and the resume point
  after the last. Anything else (a missing manifest, the earlier single-ConfigMap layout
  without cut positions, a malformed record) raises `CheckpointUnusable`: the attempt starts
  over, which is slower but never leaves a gap or an overlap.
- A ConfigMap that exists under a name the writer is about to create is reused only if its
  `recall.dev/job-uid` label names this job (a repeated write); one left by a deleted job of
  the same name is deleted first.
"""

from __future__ import annotations

from dataclasses import dataclass

from recall.kube import BlobStore, Conflict, Owner
from recall.media.types import Chunk, Cutting, Resume, Segment
from recall.resources import LABEL_COMPONENT, LABEL_JOB, TranscriptionJob, label_value
from recall.resources.errors import JobFailure
from recall.transcripts.layout import (
    LABEL_ATTEMPT,
    LABEL_JOB_UID,
    LABEL_KIND,
    MANIFEST,
    MANIFEST_KEY,
    SHARD,
    SHARD_BYTES,
    Manifest,
    Record,
    ShardRef,
    Summary,
    Transcript,
    data_bytes,
    manifest_name,
    pinned,
    record_key,
    shard_name,
)


class CheckpointUnusable(Exception):
    """The checkpoint cannot be resumed from; the message says why."""


@dataclass(frozen=True)
class Checkpoint:
    """What a resumed attempt reuses: chunks [0, chunks) in `shards`, cut with `cutting`."""

    name: str
    cutting: Cutting
    shards: tuple[ShardRef, ...]  # every one pinned
    chunks: int
    resume: Resume
    words: int
    segments: int


def job_selector(job: str) -> str:
    """The label selector of every transcript ConfigMap of the job named `job`."""
    return f"{LABEL_JOB}={label_value(job)}"


class TranscriptStore:
    """A job's transcript ConfigMaps, over any `BlobStore`."""

    def __init__(self, store: BlobStore, *, shard_bytes: int = SHARD_BYTES) -> None:
        self.store = store
        self.shard_bytes = shard_bytes

    def writer(self, job: TranscriptionJob, attempt: int) -> TranscriptWriter:
        return TranscriptWriter(self.store, job, attempt, shard_bytes=self.shard_bytes)

    # -- reading -----------------------------------------------------------------------------

    def load_transcript(self, namespace: str, name: str) -> Transcript | None:
        """The transcript a result names; None when its ConfigMap is missing.

        Raises `LookupError` when the manifest is incomplete or one of its shards is missing.
        """
        cm = self.store.get_config_map(namespace, name)
        if cm is None:
            return None
        data = cm.data or {}
        if MANIFEST_KEY not in data:
            return Transcript.from_legacy(data)
        try:
            manifest = Manifest.from_data(data)
        except ValueError as e:
            raise LookupError(f"transcript {name}: {e}") from None
        if manifest.transcript is None:
            raise LookupError(f"{name} is a checkpoint, not a complete transcript")
        segments: list[Segment] = []
        for ref in manifest.shards:
            records = self._records(namespace, ref)
            if records is None or len(records) != (ref.end or 0) - ref.first:
                raise LookupError(f"transcript {name}: shard {ref.name} is missing or incomplete")
            for record in records:
                segments.extend(record.segments)
        return Transcript(
            segments=segments,
            duration=manifest.transcript.duration,
            engine=manifest.transcript.engine,
        )

    def read_checkpoint(self, namespace: str, name: str) -> Checkpoint:
        """The resumable part of the checkpoint `name`; see the module contract."""
        cm = self.store.get_config_map(namespace, name)
        if cm is None:
            raise CheckpointUnusable(f"the checkpoint ConfigMap {name} is missing")
        data = cm.data or {}
        if MANIFEST_KEY not in data:
            raise CheckpointUnusable(f"{name} has no cut positions (an earlier layout)")
        try:
            manifest = Manifest.from_data(data)
        except ValueError as e:
            raise CheckpointUnusable(f"{name}: {e}") from None
        if manifest.cutting is None:
            raise CheckpointUnusable(f"{name} does not say how its chunks were cut")
        shards: list[ShardRef] = []
        done, position, tail, words, segments = 0, 0, "", 0, 0
        for ref in manifest.shards:
            if ref.first != done:
                break
            records = self._records(namespace, ref) or []
            taken = 0
            for record in records:
                if record.first != position or record.end <= record.first:
                    break  # a gap or an overlap: nothing from here on is usable
                position, tail = record.end, record.tail
                words += record.words
                segments += len(record.segments)
                taken += 1
            if taken:
                shards.append(ShardRef(ref.name, ref.first, ref.first + taken))
                done += taken
            if ref.end is None or taken < ref.end - ref.first:
                break
        return Checkpoint(
            name=name,
            cutting=manifest.cutting,
            shards=tuple(shards),
            chunks=done,
            resume=Resume(chunks=done, position=position, tail=tail),
            words=words,
            segments=segments,
        )

    def _records(self, namespace: str, ref: ShardRef) -> list[Record] | None:
        """The records of `ref`'s chunks, in order, up to the first missing or malformed one
        (an open shard: as many as are there); None when the shard is missing."""
        cm = self.store.get_config_map(namespace, ref.name)
        if cm is None:
            return None
        data = cm.data or {}
        out: list[Record] = []
        index = ref.first
        while ref.end is None or index < ref.end:
            raw = data.get(record_key(index))
            if raw is None:
                break
            try:
                out.append(Record.decode(raw))
            except ValueError:
                break
            index += 1
        return out

    def delete(self, namespace: str, name: str) -> bool:
        return self.store.delete_config_map(namespace, name)


class TranscriptWriter:
    """One attempt's manifest and shards; see the module contract."""

    def __init__(
        self,
        store: BlobStore,
        job: TranscriptionJob,
        attempt: int,
        *,
        shard_bytes: int = SHARD_BYTES,
    ) -> None:
        self.store = store
        self.job = job
        self.attempt = attempt
        self.shard_bytes = shard_bytes
        self.name = manifest_name(job.name, attempt)
        self.cutting: Cutting | None = None
        self.shards: tuple[ShardRef, ...] = ()
        self.chunks = 0
        self.words = 0
        self.segments = 0
        self._own = 0  # shards of this attempt so far
        self._open_bytes = 0
        self._manifest_written = False

    def begin(self, cutting: Cutting, carried: Checkpoint | None) -> str:
        """Write the manifest: `cutting`, and the chunks of `carried` (a checkpoint cut with
        the same settings) as its first shards. Returns the manifest's name."""
        shards = carried.shards if carried else ()
        self._write_manifest(Manifest(self.job.name, self.attempt, cutting, shards))
        self.cutting, self.shards, self._own, self._open_bytes = cutting, shards, 0, 0
        self.chunks = carried.chunks if carried else 0
        self.words = carried.words if carried else 0
        self.segments = carried.segments if carried else 0
        return self.name

    def add(self, chunk: Chunk, segments: list[Segment]) -> None:
        """Store the segments of `chunk`, the next chunk in order."""
        if chunk.index != self.chunks:
            raise ValueError(f"chunk {chunk.index} out of order: {self.chunks} stored")
        record = Record.of(chunk, segments)
        data = {record_key(chunk.index): record.encode()}
        size = data_bytes(data)
        if size > self.shard_bytes:
            raise JobFailure(
                "TranscriptRefused",
                f"the segments of chunk {chunk.index} take {size} bytes, more than a shard "
                f"holds ({self.shard_bytes})",
                permanent=True,
            )
        is_open = bool(self.shards) and self.shards[-1].end is None
        if is_open and self._open_bytes + size <= self.shard_bytes:
            self.store.patch_config_map(self.job.namespace, self.shards[-1].name, data)
            self._open_bytes += size
        else:
            name = shard_name(self.job.name, self.attempt, self._own)
            shards = (*pinned(self.shards, chunk.index), ShardRef(name, chunk.index))
            self._put(name, data, SHARD)
            self._write_manifest(Manifest(self.job.name, self.attempt, self.cutting, shards))
            self.shards, self._own, self._open_bytes = shards, self._own + 1, size
        self.chunks += 1
        self.words += record.words
        self.segments += len(segments)

    def finish(self, duration: float, engine: str) -> Summary:
        """Pin every shard and record the summary: the manifest is now the transcript."""
        summary = Summary(
            chunks=self.chunks,
            duration=round(duration, 3),
            engine=engine,
            words=self.words,
            segments=self.segments,
        )
        shards = pinned(self.shards, self.chunks)
        self._write_manifest(Manifest(self.job.name, self.attempt, self.cutting, shards, summary))
        self.shards = shards
        return summary

    def references(self) -> set[str]:
        """The manifest and every shard it lists (an earlier attempt's included)."""
        return {self.name, *(s.name for s in self.shards)}

    def own_names(self) -> set[str]:
        """Every name this writer may have created: its manifest, its shards, and the next
        shard (a create whose answer was lost)."""
        shards = (shard_name(self.job.name, self.attempt, n) for n in range(self._own + 1))
        return {self.name, *shards}

    # -- writes ------------------------------------------------------------------------------

    def _write_manifest(self, manifest: Manifest) -> None:
        if self._manifest_written:
            self.store.patch_config_map(self.job.namespace, self.name, manifest.to_data())
        else:
            self._put(self.name, manifest.to_data(), MANIFEST)
            self._manifest_written = True

    def _put(self, name: str, data: dict[str, str], kind: str) -> None:
        """Create the ConfigMap, or (a repeated write) add `data` to the one this job made."""
        namespace, uid = self.job.namespace, self.job.metadata.uid
        owner = Owner(self.job.api_version, self.job.kind, self.job.name, uid) if uid else None
        labels = {
            LABEL_JOB: label_value(self.job.name),
            LABEL_ATTEMPT: str(self.attempt),
            LABEL_KIND: kind,
            LABEL_COMPONENT: "transcript",
        }
        if uid:
            labels[LABEL_JOB_UID] = uid
        for _ in range(3):
            try:
                self.store.create_config_map(namespace, name, data, labels=labels, owner=owner)
                return
            except Conflict:
                existing = self.store.get_config_map(namespace, name)
                if existing is None:
                    continue  # deleted meanwhile: create it
                if existing.labels.get(LABEL_JOB_UID) == labels.get(LABEL_JOB_UID):
                    self.store.patch_config_map(namespace, name, data)
                    return
                # A deleted namesake's leftover, waiting for the garbage collector.
                self.store.delete_config_map(namespace, name)
        raise Conflict(f"configmaps {name!r} keeps reappearing", status=409)
