"""Reading a job's checkpoint back from the results store: what a resumed attempt may reuse.

Contract:
- `read_checkpoint(bucket, job)` returns the chunks the checkpoint's parts
  (`status.progress.parts`) name, contiguous from the first, each continuing exactly where the
  previous ended (or, in a file split by channel, at the start of the next channel), and the
  resume point after the last. Anything else (no parts, a missing cutting, a missing or
  malformed record) ends the usable part; when nothing is usable it raises `CheckpointUnusable`
  and the attempt starts over: slower, but never a gap or an overlap.
- A record that held words back (redaction's hold rule) was stored without them: the resume
  transcribes again the chunks they were said in (`Checkpoint.retake`), starting before them.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from recall.bucket import Bucket
from recall.media.media import CHANNEL_STRIDE
from recall.media.types import Cutting, Resume
from recall.resources import Part, TranscriptionJob
from recall.transcripts.layout import CUTTING, attempt_dir, chunk_key
from recall.transcripts.records import Record, decode_cutting

READERS = 8  # chunk records read at once when a resumed attempt reads its checkpoint


class CheckpointUnusable(Exception):
    """The checkpoint cannot be resumed from; the message says why."""


@dataclass(frozen=True)
class Checkpoint:
    """What a resumed attempt reuses: chunks [0, chunks) in `parts`, cut with `cutting`."""

    cutting: Cutting
    parts: tuple[Part, ...]
    records: tuple[Record, ...]
    resume: Resume
    retake: int = 0  # the last chunks, transcribed again for the words their records held

    @property
    def chunks(self) -> int:
        return len(self.records)

    @property
    def context(self) -> str:
        """The engine's next prompt, as `recall.transcripts.holding.Prompt` keeps it: the stored
        text of the last record that has text (before a retake: of those before the retake)."""
        records = self.records[: len(self.records) - self.retake]
        return next((r.text for r in reversed(records) if r.text), "")

    def describe(self) -> str:
        return ",".join(f"a{p.attempt}:{p.first}-{p.end}" for p in self.parts) or "empty"


def language_of(records: list[Record]) -> tuple[str, float | None] | None:
    return next(((r.language, r.language_probability) for r in records if r.language), None)


def directory_of(job: TranscriptionJob, attempt: int, token: str) -> str:
    return attempt_dir(job.namespace, job.name, job.metadata.uid or "-", attempt, token)


def read_checkpoint(bucket: Bucket, job: TranscriptionJob) -> Checkpoint:
    """The resumable part of `job`'s checkpoint; see the module contract."""
    progress = job.status.progress
    parts = list(progress.parts) if progress else []
    if not parts:
        raise CheckpointUnusable("the checkpoint names no stored chunks")
    first_dir = directory_of(job, parts[0].attempt, parts[0].token)
    raw = bucket.get(first_dir + CUTTING)
    if raw is None:
        raise CheckpointUnusable(f"{first_dir}{CUTTING} is missing")
    try:
        cutting = decode_cutting(raw)
    except ValueError as e:
        raise CheckpointUnusable(f"{first_dir}{CUTTING}: {e}") from None
    records: list[Record] = []
    kept: list[Part] = []
    position, tail = 0, ""
    for part in parts:
        if part.first != len(records) or part.end <= part.first:
            break
        directory = directory_of(job, part.attempt, part.token)
        keys = [chunk_key(directory, i) for i in range(part.first, part.end)]
        with ThreadPoolExecutor(READERS, thread_name_prefix="checkpoint") as pool:
            blobs = list(pool.map(bucket.get, keys))
        taken = 0
        for blob in blobs:
            if blob is None:
                break
            try:
                record = Record.decode(blob)
            except ValueError:
                break
            if not follows(record, position, first=not records):
                break  # a gap or an overlap: nothing from here on is usable
            records.append(record)
            position, tail = record.end, record.tail
            taken += 1
        if taken:
            kept.append(part.model_copy(update={"end": part.first + taken}))
        if taken < part.end - part.first:
            break
    if not records:
        raise CheckpointUnusable("none of the checkpoint's chunks could be read back")
    resume = Resume(chunks=len(records), position=position, tail=tail)
    retake = retake_of(records, cutting.rate)
    if retake:  # the held words were never stored: transcribe their chunks again
        first = len(records) - retake
        before = records[first - 1].tail if first else ""
        resume = Resume(chunks=first, position=records[first].first, tail=before)
    return Checkpoint(
        cutting=cutting, parts=tuple(kept), records=tuple(records), resume=resume, retake=retake
    )


def follows(record: Record, position: int, *, first: bool) -> bool:
    """Whether `record` continues exactly where the one before it ended (`position`): at it,
    or, in a split file, at the start of the next channel (its chunks come after all of the
    channel before, so a record there means that channel was cut to its end)."""
    if record.end <= record.first:
        return False
    if record.first == position:
        return True
    return not first and record.first == (position // CHANNEL_STRIDE + 1) * CHANNEL_STRIDE


def retake_of(records: list[Record], rate: int) -> int:
    """How many of the last `records` a resume transcribes again: those whose audio holds the
    words the last record held back (held words may go back over several short chunks)."""
    since = records[-1].held if records else None
    if since is None:
        return 0
    first = len(records) - 1
    channel = records[-1].channel
    while (
        first > 0
        and records[first - 1].channel == channel
        and (records[first].first % CHANNEL_STRIDE) / rate > since
    ):
        first -= 1
    return len(records) - first
