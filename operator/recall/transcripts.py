"""The transcript store: ConfigMaps owned by the job, one per attempt and purpose.

- `<job>-chunks-<attempt>`: the segments of each finished chunk (`chunk-00003.json`), written
  before the checkpoint that counts it. `status.progress.checkpoint` names the one ConfigMap
  that holds every chunk below `chunksDone`; a resumed attempt copies those chunks into its
  own ConfigMap first. A zombie writes only into its own attempt's ConfigMap, which no
  checkpoint references once its lease is gone.
- `<job>-transcript-<attempt>`: the assembled transcript (`transcript.txt`, `segments.json`),
  written before the fenced `complete`; it becomes the result only through that write.

Owner references make the garbage collector delete them with the job. A ConfigMap holds at
most 1 MiB, which bounds a transcript to roughly 10 hours of speech.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from recall.engines.base import Segment
from recall.models import LABEL_COMPONENT, LABEL_JOB, TranscriptionJob, label_value, object_name
from recall.store import BlobStore, Conflict, Owner

LABEL_ATTEMPT = "recall.dev/attempt"
LABEL_KIND = "recall.dev/store"


def chunks_name(job: str, attempt: int) -> str:
    return object_name(job, f"chunks-{attempt}")


def transcript_name(job: str, attempt: int) -> str:
    return object_name(job, f"transcript-{attempt}")


def chunk_key(index: int) -> str:
    return f"chunk-{index:05d}.json"


@dataclass(frozen=True)
class Transcript:
    text: str
    segments: list[Segment]
    duration: float
    engine: str

    @property
    def words(self) -> int:
        return len(self.text.split())

    def to_data(self) -> dict[str, str]:
        return {
            "transcript.txt": self.text,
            "segments.json": json.dumps([s.model_dump() for s in self.segments]),
            "meta.json": json.dumps(
                {"duration": self.duration, "engine": self.engine, "words": self.words}
            ),
        }

    @classmethod
    def from_data(cls, data: dict[str, str]) -> Transcript:
        meta: dict[str, Any] = json.loads(data.get("meta.json", "{}"))
        segments = [Segment.model_validate(s) for s in json.loads(data.get("segments.json", "[]"))]
        return cls(
            text=data.get("transcript.txt", ""),
            segments=segments,
            duration=float(meta.get("duration", 0.0)),
            engine=str(meta.get("engine", "")),
        )


def assemble(
    segments_by_chunk: dict[int, list[Segment]], duration: float, engine: str
) -> Transcript:
    """Join chunk segments in chunk order (times are already absolute)."""
    ordered = [s for i in sorted(segments_by_chunk) for s in segments_by_chunk[i]]
    text = " ".join(s.text.strip() for s in ordered if s.text.strip())
    return Transcript(text=text, segments=ordered, duration=duration, engine=engine)


class TranscriptStore:
    """Reads and writes a job's chunk and transcript ConfigMaps."""

    def __init__(self, store: BlobStore) -> None:
        self.store = store

    def _write(
        self, job: TranscriptionJob, name: str, data: dict[str, str], labels: dict[str, str]
    ) -> None:
        """Create the ConfigMap, or add to its data if it exists (a resumed or retried write)."""
        owner = None
        if job.metadata.uid:
            owner = Owner(job.api_version, job.kind, job.name, job.metadata.uid)
        try:
            self.store.create_config_map(job.namespace, name, data, labels=labels, owner=owner)
        except Conflict:
            self.store.patch_config_map(job.namespace, name, data)

    def _labels(self, job: TranscriptionJob, attempt: int, kind: str) -> dict[str, str]:
        return {
            LABEL_JOB: label_value(job.name),
            LABEL_ATTEMPT: str(attempt),
            LABEL_KIND: kind,
            LABEL_COMPONENT: "transcript",
        }

    def load_checkpoint(
        self, job: TranscriptionJob, checkpoint: str | None, done: int
    ) -> dict[int, list[Segment]]:
        """Segments of chunks [0, done) from the checkpoint ConfigMap; {} when there is none.

        Raises `LookupError` if the checkpoint names a ConfigMap or chunk that is missing.
        """
        if not checkpoint or done <= 0:
            return {}
        cm = self.store.get_config_map(job.namespace, checkpoint)
        if cm is None:
            raise LookupError(f"checkpoint ConfigMap {checkpoint} is missing")
        data = cm.data or {}
        out: dict[int, list[Segment]] = {}
        for i in range(done):
            raw = data.get(chunk_key(i))
            if raw is None:
                raise LookupError(f"checkpoint {checkpoint} lacks chunk {i}")
            out[i] = [Segment.model_validate(s) for s in json.loads(raw)]
        return out

    def save_chunks(
        self, job: TranscriptionJob, attempt: int, chunks: dict[int, list[Segment]]
    ) -> str:
        """Write (or add) chunk segments to this attempt's chunk ConfigMap; returns its name."""
        name = chunks_name(job.name, attempt)
        data = {
            chunk_key(i): json.dumps([s.model_dump() for s in segs]) for i, segs in chunks.items()
        }
        self._write(job, name, data, self._labels(job, attempt, "chunks"))
        return name

    def save_transcript(self, job: TranscriptionJob, attempt: int, transcript: Transcript) -> str:
        name = transcript_name(job.name, attempt)
        self._write(job, name, transcript.to_data(), self._labels(job, attempt, "transcript"))
        return name

    def load_transcript(self, namespace: str, name: str) -> Transcript | None:
        cm = self.store.get_config_map(namespace, name)
        if cm is None:
            return None
        return Transcript.from_data(cm.data or {})

    def delete(self, namespace: str, name: str) -> bool:
        return self.store.delete_config_map(namespace, name)
