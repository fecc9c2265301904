"""Reading and writing an attempt's chunks, checkpoint and transcript in the results store.

Contract (keys: `layout`; what a resume reuses: `checkpoint`):
- `AttemptWriter` is one attempt's writer, under the attempt's own directory, every object
  written once. `begin` writes how the media is cut (an attempt's first write, before any paid
  call, so a store that refuses is found out first); `add` stores one chunk; `finish` writes
  the transcript and the formats `spec.output` asks for. Each returns the checkpoint's parts
  for the renewal that follows: the job's status is the only record of what is done, and the
  only API write per chunk.
- A write whose answer was lost is repeated with the same bytes and succeeds. The writer's
  state changes only after its write succeeded. Store errors propagate unchanged.
- A checkpoint names at most `MAX_PARTS` parts: an attempt resuming from that many first copies
  the chunks it carries into its own directory, so its checkpoint names one part.
- The language detected for the file (`spec.language` auto or empty) is recorded in every chunk
  record from the one it was detected at, so a resumed attempt goes on in it
  (`AttemptWriter.language`) instead of detecting again; `finish` records it, with the model
  and its digest, in the transcript: its probability only when the engine gave one, and no
  language for `auto` when none was detected (never "auto").
- A split file's chunk labels its segments and words with its channel; the transcript
  interleaves the channels by time (`recall.transcripts.assemble`).
- Redaction (`spec.transcript.redact`): each chunk is redacted as it is stored, under the hold
  rule (`recall.transcripts.holding`): no record, transcript or output holds the unredacted
  text. `redact.keepOriginal` stores each chunk's unredacted record beside it and the
  unredacted transcript as `original.json`, deleted with the job's other objects.
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass, field
from functools import partial

from recall.bucket import Bucket
from recall.engines.languages import majority
from recall.media.types import Chunk, Cutting, Media, Segment
from recall.resources import AUTO, OutputFormat, Part, RedactSpec, TranscriptionJob
from recall.transcripts.assemble import assemble
from recall.transcripts.checkpoint import Checkpoint, directory_of, language_of
from recall.transcripts.formats import render
from recall.transcripts.holding import Holding, step, stored
from recall.transcripts.layout import (
    CUTTING,
    MAX_PARTS,
    REDACTED_AUDIO,
    chunk_key,
    original_chunk_key,
    original_key,
    output_key,
    transcript_key,
)
from recall.transcripts.records import Record, Summary, Transcript, encode_cutting
from recall.transcripts.subtitles import Rules


def wants_words(job: TranscriptionJob) -> bool:
    t = job.spec.transcript
    return bool(t and t.words)


def asked_language(job: TranscriptionJob) -> str | None:
    language = (job.spec.language or "").strip()
    return language if language and language != AUTO else None


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
    carried: tuple[Part, ...] = ()
    records: list[Record] = field(default_factory=list)
    own_first: int = 0
    detected: tuple[str, float | None] | None = None  # the file's language detected, if any
    holding: Holding = field(default_factory=Holding)  # the hold rule's words for the next
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

    def parts(self) -> list[Part]:
        """The checkpoint: the parts carried from earlier attempts, then this attempt's own."""
        if self.chunks <= self.own_first:
            return list(self.carried)
        own = Part(attempt=self.attempt, token=self.token, first=self.own_first, end=self.chunks)
        return [*self.carried, own]

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
        self.carried, self.records = parts, records
        self.own_first = 0 if not parts else len(records)
        self.holding, self.originals = Holding.resuming(carried), {}
        if parts == () and carried is not None and self.keep_original:
            for i in range(len(records)):  # one part again: the originals go with it
                raw = self.bucket.get(original_chunk_key(self._directory_of(i, carried), i))
                if raw is not None:
                    self.bucket.put(original_chunk_key(self.directory, i), raw)
        return self.parts()

    @property
    def redact(self) -> RedactSpec | None:
        t = self.job.spec.transcript
        return t.redact if t else None

    @property
    def keep_original(self) -> bool:
        return bool(self.redact and self.redact.keep_original)

    def _directory_of(self, index: int, checkpoint: Checkpoint | None = None) -> str:
        """The directory of chunk `index`'s record: a carried part's, else this attempt's."""
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
        spec = self.redact
        holding, cut = step(self.holding, chunk, segments, redacting=spec is not None)
        if cut is None:  # a retake's chunk: its words are held for the next record
            self.holding = holding
            return self.parts()
        if chunk.index != self.chunks:
            raise ValueError(f"chunk {chunk.index} out of order: {self.chunks} stored")
        language = language or self.language
        record_of = partial(Record.of, chunk, language=language, held=cut.held, carried=cut.carried)
        original = None
        # Kept as stored (ms times), as a resume reads it back, so resumed and unbroken runs agree.
        if self.keep_original:
            raw = record_of([*cut.ended, *cut.kept]).encode()
            self.bucket.put(original_chunk_key(self.directory, chunk.index), raw)
            original = Record.decode(raw)
        types = spec.types if spec is not None else None
        raw = record_of(stored(cut, types)).encode()
        self.bucket.put(chunk_key(self.directory, chunk.index), raw)
        record = Record.decode(raw)
        # Only now, the writes done: a write repeated after a lost answer sees the same state.
        if original is not None:
            self.originals[chunk.index] = original
        self.holding = holding
        self.records.append(record)
        return self.parts()

    @property
    def pending(self) -> list[Segment]:
        """The words held back into the next record (unredacted, in memory only)."""
        return list(self.holding.pending)

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
        """Write the transcript, then each of `formats` beside it. `media` gives the channels and,
        with `redact.audio`, the audio written with the redacted spans silenced (if it has any)."""
        segments = assemble(self.records)
        transcript = self._transcript(segments, duration, engine, model, model_digest)
        if self.keep_original:
            originals = assemble(self._originals())
            original = dataclasses.replace(transcript, segments=originals, redacted=None)
            self.bucket.put(original_key(self.directory), original.encode())
        self.bucket.put(self.transcript_key, transcript.encode())
        for fmt in formats:
            body = render(transcript, fmt).encode()
            self.bucket.put(output_key(self.directory, fmt), body)
        self._redacted_audio(segments, media)
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
        )

    def _transcript(
        self,
        segments: list[Segment],
        duration: float,
        engine: str,
        model: str | None,
        model_digest: str | None,
    ) -> Transcript:
        """The transcript of `segments`, in the file's language: the most spoken when segments
        carry their own (`languageScope: segment`), else the one detected, else the one asked."""
        spec = self.job.spec
        detected = self.language
        spoken = majority((s.language, s.end - s.start) for s in segments)
        if spoken is not None and (detected is None or detected[0] != spoken):
            detected = (spoken, None)
        rules = Rules.of(spec.transcript.subtitles if spec.transcript else None)
        return Transcript(
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

    def _redacted_audio(self, segments: list[Segment], media: Media | None) -> None:
        """With `redact.audio`, write the media's audio (if any), the redacted words silenced."""
        silenced = getattr(media, "silenced", None)
        if self.redact is None or not self.redact.audio or not callable(silenced):
            return
        spans = [(w.start, w.end) for s in segments for w in s.words or [] if w.redacted]
        with tempfile.TemporaryFile() as wav:
            silenced(spans, wav)
            self.bucket.put_file(output_key(self.directory, REDACTED_AUDIO), wav)

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
