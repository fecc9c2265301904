"""Reading and writing an attempt's chunks, checkpoint and transcript in the results store.

Contract (layout: `layout`):
- `AttemptWriter` is one attempt's writer, under the attempt's own directory (job UID,
  attempt, lease token), every object written once. `begin` writes how the media is cut (the
  first write of an attempt, before any paid call, so a store that refuses is found out
  first); `add` stores one chunk; `finish` writes the transcript and the formats the job's
  `spec.output` asks for. Each returns the checkpoint's parts for the renewal that follows: the
  job's status is the only record of what is done, and the only API write per chunk.
- A write whose answer was lost is repeated with the same bytes and succeeds (write-once with
  the same content). The writer's state changes only after its write succeeded. Errors of the
  store propagate unchanged (`recall.bucket.errors`).
- `read_checkpoint(job)` returns what a resumed attempt may reuse: the chunks the job's
  checkpoint parts name, read back from the store, contiguous from the first, each continuing
  exactly where the previous one ended, and the resume point after the last. Anything else (no
  parts, a missing cutting, a missing or malformed chunk record) ends the usable part; when
  nothing is usable it raises `CheckpointUnusable` and the attempt starts over, which is slower
  but never leaves a gap or an overlap.
- A checkpoint names at most `MAX_PARTS` parts. An attempt that resumes from that many copies
  the chunks it carries into its own directory first, so its checkpoint names one part.
- The language detected for the file (`spec.language` auto or empty on a multilingual model)
  is recorded in every chunk record from the chunk it was detected at on, so a resumed attempt
  goes on in it (`Checkpoint.language`) instead of detecting again; `finish` records it, with
  the model and its digest, in the transcript: with its probability only when the engine gave
  one, and no language at all for `auto` when nothing was detected (never "auto").
- A chunk of a file split into channels labels its segments and words with its channel; the
  transcript interleaves the channels by time (`recall.transcripts.assemble`, which also joins
  a sentence cut at a chunk's end).
- Redaction (`spec.transcript.redact`): each chunk is redacted as it is stored
  (`recall.transcripts.redact`), its last words held back into the next chunk's record (the
  hold rule) so that an entity across the seam is found whole: no record, transcript or output
  holds the unredacted text. `redact.keepOriginal` stores each chunk's unredacted record beside
  it (`c000042.original.json`) and the unredacted transcript as `original.json`, deleted with
  the job's other objects. A resume from a record that held words back transcribes the chunks
  those words were said in again (the last one, or more when they go back over short chunks)
  and keeps only the words from where the hold began (the held words were never written in the
  clear): a chunk or two more for the engine, nothing lost.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from recall.bucket import Bucket
from recall.media.media import CHANNEL_STRIDE
from recall.media.types import Chunk, Cutting, Media, Resume, Segment
from recall.resources import AUTO, OutputFormat, Part, RedactSpec, TranscriptionJob
from recall.transcripts.assemble import assemble
from recall.transcripts.formats import render
from recall.transcripts.layout import (
    CUTTING,
    MAX_PARTS,
    REDACTED_AUDIO,
    Record,
    Summary,
    Transcript,
    attempt_dir,
    chunk_key,
    decode_cutting,
    encode_cutting,
    original_chunk_key,
    original_key,
    output_key,
    transcript_key,
)
from recall.transcripts.redact import hold, redact, text_of_words
from recall.transcripts.subtitles import Rules

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
    def words(self) -> int:
        return sum(r.words for r in self.records)

    @property
    def language(self) -> tuple[str, float | None] | None:
        """The language detected for the file, with its probability (if any), if it was."""
        return language_of(self.records)

    @property
    def context(self) -> str:
        """What the engine is prompted with next: the text of the last chunk that has text, as
        a running attempt keeps it (a silent chunk does not clear it); before a retake, the
        text before the chunks transcribed again."""
        records = self.records[: len(self.records) - self.retake]
        return next((r.text for r in reversed(records) if r.text), "")

    def describe(self) -> str:
        return ",".join(f"a{p.attempt}:{p.first}-{p.end}" for p in self.parts) or "empty"


def language_of(
    records: list[Record] | tuple[Record, ...],
) -> tuple[str, float | None] | None:
    for record in records:
        if record.language:
            return record.language, record.language_probability
    return None


def wants_words(job: TranscriptionJob) -> bool:
    """Whether `job` asks for word timings (`spec.transcript.words`)."""
    t = job.spec.transcript
    return bool(t and t.words)


def asked_language(job: TranscriptionJob) -> str | None:
    """The language `job` names (`spec.language`); None for `auto` or none."""
    language = (job.spec.language or "").strip()
    return language if language and language != AUTO else None


def redaction(job: TranscriptionJob) -> RedactSpec | None:
    """What `job` redacts (`spec.transcript.redact`), if anything."""
    t = job.spec.transcript
    return t.redact if t else None


def subtitle_rules(job: TranscriptionJob) -> Rules:
    t = job.spec.transcript
    return Rules.of(t.subtitles if t else None)


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
            if record.first != position or record.end <= record.first:
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


def load_transcript(bucket: Bucket, key: str) -> Transcript | None:
    """The transcript at `key`; None when it is missing. Raises LookupError when malformed."""
    raw = bucket.get(key)
    if raw is None:
        return None
    try:
        return Transcript.decode(raw)
    except ValueError as e:
        raise LookupError(f"{bucket.url_of(key)}: {e}") from None


@dataclass
class AttemptWriter:
    """One attempt's objects; see the module contract."""

    bucket: Bucket
    job: TranscriptionJob
    attempt: int
    token: str
    cutting: Cutting | None = None
    carried: tuple[Part, ...] = ()
    records: list[Record] = field(default_factory=list)
    own_first: int = 0
    detected: tuple[str, float | None] | None = None  # the file's language detected, if any
    pending: list[Segment] = field(default_factory=list)  # held back into the next record
    piece: bool = False  # the first pending segment continues the last stored one
    retake: tuple[int, int, float] | None = None  # chunks [first, end) again, words from then
    originals: dict[int, Record] = field(default_factory=dict)  # unredacted, keepOriginal

    @property
    def directory(self) -> str:
        return directory_of(self.job, self.attempt, self.token)

    @property
    def transcript_key(self) -> str:
        return transcript_key(self.directory)

    @property
    def chunks(self) -> int:
        return len(self.records)

    @property
    def words(self) -> int:
        return sum(r.words for r in self.records)

    def parts(self) -> list[Part]:
        """The checkpoint: the parts carried from earlier attempts, then this attempt's own."""
        own = []
        if self.chunks > self.own_first:
            own = [
                Part(
                    attempt=self.attempt,
                    token=self.token,
                    first=self.own_first,
                    end=self.chunks,
                )
            ]
        return [*self.carried, *own]

    def begin(self, cutting: Cutting, carried: Checkpoint | None) -> list[Part]:
        """Write how the media is cut; take over the chunks of `carried` (a checkpoint cut the
        same way). Returns the checkpoint's parts."""
        self.bucket.put(self.directory + CUTTING, encode_cutting(cutting))
        records = list(carried.records) if carried else []
        parts = carried.parts if carried else ()
        if len(parts) >= MAX_PARTS:
            for i, record in enumerate(records):  # one part again: copy what is carried
                self.bucket.put(chunk_key(self.directory, i), record.encode())
            parts = ()
        self.cutting, self.carried, self.records = cutting, parts, records
        self.own_first = 0 if not parts else len(records)
        self.pending, self.piece, self.originals = [], False, {}
        self.retake = None
        if carried is not None and carried.retake:
            since = records[-1].held
            assert since is not None
            self.retake = (len(records) - carried.retake, len(records), since)
        if parts == () and carried is not None and self.keep_original:
            for i in range(len(records)):  # one part again: the originals go with it
                raw = self.bucket.get(original_chunk_key(self._directory_of(i, carried), i))
                if raw is not None:
                    self.bucket.put(original_chunk_key(self.directory, i), raw)
        return self.parts()

    @property
    def redact(self) -> RedactSpec | None:
        return redaction(self.job)

    @property
    def keep_original(self) -> bool:
        return bool(self.redact and self.redact.keep_original)

    def _directory_of(self, index: int, checkpoint: Checkpoint | None = None) -> str:
        """The directory whose records hold chunk `index` (carried parts, else this
        attempt's)."""
        for part in checkpoint.parts if checkpoint else self.carried:
            if part.first <= index < part.end:
                return directory_of(self.job, part.attempt, part.token)
        return self.directory

    @property
    def language(self) -> tuple[str, float | None] | None:
        """The language detected for the file: by this attempt, or in the records it carries."""
        return self.detected or language_of(self.records)

    def add(
        self,
        chunk: Chunk,
        segments: list[Segment],
        language: tuple[str, float | None] | None = None,
    ) -> list[Part]:
        """Store the segments of `chunk`, the next chunk in order, and the language detected
        for the file (`language`, else the one an earlier record has); returns the parts."""
        if chunk.channel:
            segments = [labelled(s, chunk.channel) for s in segments]
        if self.retake is not None and chunk.index < self.retake[1]:
            first, end, since = self.retake
            words, piece = from_time(segments, since)
            if chunk.index == first:
                self.pending, self.piece = words, piece
            else:
                self.pending = [*self.pending, *words]
            if chunk.index == end - 1:
                self.retake = None
            return self.parts()
        if chunk.index != self.chunks:
            raise ValueError(f"chunk {chunk.index} out of order: {self.chunks} stored")
        language = language or self.language
        spec = self.redact
        if spec is None:
            record = Record.of(chunk, segments, language)
            self.bucket.put(chunk_key(self.directory, chunk.index), record.encode())
            self.records.append(record)
            return self.parts()
        record, original, held, piece = self._redacted(chunk, segments, language, spec)
        if original is not None:  # keepOriginal: the unredacted record, under its own key
            self.bucket.put(original_chunk_key(self.directory, chunk.index), original.encode())
        self.bucket.put(chunk_key(self.directory, chunk.index), record.encode())
        # Only now, the writes done: a write repeated after a lost answer sees the same state.
        if original is not None:
            self.originals[chunk.index] = original
        self.pending, self.piece = held, piece
        self.records.append(record)
        return self.parts()

    def _redacted(
        self,
        chunk: Chunk,
        segments: list[Segment],
        language: tuple[str, float | None] | None,
        spec: RedactSpec,
    ) -> tuple[Record, Record | None, list[Segment], bool]:
        """The record of `chunk` under the hold rule, redacted; its unredacted record with
        keepOriginal; the words held back for the next, and whether the first of them
        continues a segment. Changes nothing."""
        carried = self.piece and bool(self.pending)
        pending = self.pending
        ended: list[Segment] = []  # held words of a channel that ended: redacted on their own
        if pending and segments and pending[-1].channel != segments[0].channel:
            ended, pending = pending, []
        whole = [*pending, *segments]
        kept, held, piece = (whole, [], False) if chunk.last else hold(whole)
        at = held[0].start if held else None
        original = None
        if self.keep_original:
            original = Record.of(chunk, [*ended, *kept], language, held=at, carried=carried)
        stored = [*redact(ended, spec.types), *redact(kept, spec.types)]
        record = Record.of(chunk, stored, language, held=at, carried=carried)
        return record, original, held, piece

    def finish(
        self,
        duration: float,
        engine: str,
        formats: list[OutputFormat],
        *,
        model: str | None = None,
        model_digest: str | None = None,
        media: Media | None = None,
    ) -> Summary:
        """Write the transcript, then each output format of `formats` beside it. `model` and
        `model_digest` name the model that transcribed it, when the engine knows them; `media`
        is what it was transcribed from (its channels, and with `redact.audio` the audio copy
        with the redacted spans silenced, `out.redacted.wav`, when it has audio)."""
        segments = assemble(self.records)
        spec = self.job.spec
        detected = self.language
        spoken = most_spoken(segments)  # languageScope segment: each segment has its own
        if spoken is not None and (detected is None or detected[0] != spoken):
            detected = (spoken, None)
        rules = subtitle_rules(self.job)
        transcript = Transcript(
            segments=segments,
            duration=round(duration, 3),
            engine=engine,
            job=self.job.name,
            namespace=self.job.namespace,
            uid=self.job.metadata.uid or "",
            attempt=self.attempt,
            token=self.token,
            batch=spec.batch_ref,
            item=spec.item,
            language=detected[0] if detected else asked_language(self.job),
            language_probability=(
                round(detected[1], 4) if detected and detected[1] is not None else None
            ),
            model=model,
            model_digest=model_digest,
            word_timings=wants_words(self.job),
            subtitles=rules.to_data() if rules != Rules() else None,
            redacted=list(self.redact.types) if self.redact else None,
        )
        if self.keep_original:
            originals = assemble(self._originals())
            original = dataclasses.replace(transcript, segments=originals, redacted=None)
            self.bucket.put(original_key(self.directory), original.encode())
        self.bucket.put(self.transcript_key, transcript.encode())
        for fmt in formats:
            body = render(transcript, fmt).encode()
            self.bucket.put(output_key(self.directory, fmt), body)
        audio = None
        silenced = getattr(media, "silenced", None)
        if self.redact is not None and self.redact.audio and callable(silenced):
            spans = [(w.start, w.end) for s in segments for w in s.words or [] if w.redacted]
            audio = output_key(self.directory, REDACTED_AUDIO)
            self.bucket.put(audio, silenced(spans))
        return Summary(
            chunks=self.chunks,
            duration=transcript.duration,
            engine=engine,
            words=transcript.words,
            segments=len(segments),
            model=model,
            model_digest=model_digest,
            language=transcript.language,
            language_probability=transcript.language_probability,
            channels=int(getattr(media, "channels", 1)),
            mono=bool(getattr(media, "mono", False)),
            audio=audio,
        )

    def _originals(self) -> list[Record]:
        """Every chunk's unredacted record: this attempt's from memory, the carried ones read
        back (a record whose original is missing is taken as it was stored)."""
        out = []
        for i, record in enumerate(self.records):
            found = self.originals.get(i)
            if found is None:
                raw = self.bucket.get(original_chunk_key(self._directory_of(i), i))
                found = Record.decode(raw) if raw is not None else record
            out.append(found)
        return out


def most_spoken(segments: list[Segment]) -> str | None:
    """The language of the most speech time among segments that carry one (segment scope), the
    file's language; None when none does."""
    seconds: dict[str, float] = {}
    for s in segments:
        if s.language:
            seconds[s.language] = seconds.get(s.language, 0.0) + max(0.0, s.end - s.start)
    return max(seconds, key=lambda k: seconds[k]) if seconds else None


def labelled(segment: Segment, channel: str) -> Segment:
    """`segment` and its words labelled with `channel`."""
    words = [w.model_copy(update={"channel": channel}) for w in segment.words or []]
    update = {"channel": channel, "words": words if segment.words is not None else None}
    return segment.model_copy(update=update)


def from_time(segments: list[Segment], at: float) -> tuple[list[Segment], bool]:
    """The words of `segments` from `at` on (a retake's held words), and whether the first
    of them continues a segment."""
    out: list[Segment] = []
    piece = False
    for s in segments:
        words = [w for w in s.words or [] if w.start >= at - 0.05]
        if s.words and words:
            if not out and len(words) < len(s.words):
                piece = True
            out.append(
                s.model_copy(
                    update={"words": words, "text": text_of_words(words), "start": words[0].start}
                )
            )
        elif not s.words and s.start >= at - 0.05:
            out.append(s)
    return out, piece
