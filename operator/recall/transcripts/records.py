"""The records the work writes to the results store (keys: `layout`), and how each is encoded. Pure.

- A chunk record is `{"cut": [first, end], "tail": "…", "segments": [segment…]}`: the sample
  range it covers, the signature of the samples before its end, its segments with absolute
  times; once the language was detected, `"language": ["fr", 0.97]` (`["en", null]` without a
  probability). A segment is `[start, end, "text"]`, or with the model's confidence and its
  words `[start, end, "text", confidence, [[start, end, "word", probability]…]]` (either may be
  null), then its speaker, channel, language and translation, trailing nulls left out; a word
  likewise goes on with its speaker, channel and the type of a redacted span. A split file's
  record says its `"channel"`; with redaction on, `"held": 12.3` says where the words held
  back into the next record begin, and `"carried": true` that its first segment continues the
  previous record's last (`recall.transcripts.redact`).
- The cutting record is `{"format": 1, "cutting": {…}}`: how the media was cut, which a resumed
  attempt must cut the same way (`recall.media.types.Cutting`).
- The transcript holds every segment once (same encoding), with the job, attempt and token that
  made it, the model and its digest, the language, the subtitle rules its srt and vtt follow,
  and whether it is redacted. Written as format 3; formats 1 and 2 are still read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from recall.media.types import Chunk, Cutting, Segment, Word, text_of

FORMAT = 1  # of the cutting record
TRANSCRIPT_FORMAT = 3  # 3: speakers, channels, redactions; 2: words; 1 is still read


def dumps(value: object) -> bytes:
    """Compact JSON, UTF-8, non-ASCII characters unescaped."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


# --- chunk records --------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """One chunk record (see the module docstring)."""

    first: int
    end: int
    tail: str
    segments: list[Segment]
    language: str | None = None
    language_probability: float | None = None
    channel: str | None = None  # the channel of a split file it is a chunk of
    held: float | None = None  # where the words held back into the next record begin
    carried: bool = False  # its first segment continues the previous record's last one

    @classmethod
    def of(
        cls,
        chunk: Chunk,
        segments: list[Segment],
        language: tuple[str, float | None] | None = None,
        *,
        held: float | None = None,
        carried: bool = False,
    ) -> Record:
        return cls(
            first=chunk.first,
            end=chunk.end,
            tail=chunk.tail,
            segments=segments,
            language=language[0] if language else None,
            language_probability=language[1] if language else None,
            channel=chunk.channel,
            held=held,
            carried=carried,
        )

    def encode(self) -> bytes:
        data: dict[str, Any] = {
            "cut": [self.first, self.end],
            "tail": self.tail,
            "segments": [encode_segment(s) for s in self.segments],
        }
        if self.language:
            p = self.language_probability
            data["language"] = [self.language, round(p, 4) if p is not None else None]
        if self.channel:
            data["channel"] = self.channel
        if self.held is not None:
            data["held"] = round(self.held, 3)
        if self.carried:
            data["carried"] = True
        return dumps(data)

    @classmethod
    def decode(cls, raw: bytes) -> Record:
        """Raises ValueError when `raw` is not a record."""
        try:
            data = json.loads(raw)
            first, end = (int(v) for v in data["cut"])
            language, probability = data.get("language") or (None, None)
            return cls(
                first=first,
                end=end,
                tail=str(data.get("tail", "")),
                segments=segments_of(data),
                language=str(language) if language else None,
                language_probability=float(probability) if probability is not None else None,
                channel=data.get("channel"),
                held=float(data["held"]) if data.get("held") is not None else None,
                carried=bool(data.get("carried")),
            )
        except (KeyError, TypeError, ValueError, UnicodeDecodeError) as e:
            raise ValueError(f"not a chunk record: {e}") from None

    @property
    def text(self) -> str:
        return text_of(self.segments)


def _trimmed(values: list[Any]) -> list[Any]:
    while values and values[-1] is None:
        values.pop()
    return values


def encode_word(w: Word) -> list[Any]:
    out = [round(w.start, 3), round(w.end, 3), w.text, round(w.probability, 4)]
    return out + _trimmed([w.speaker, w.channel, w.redacted])


def decode_word(item: list[Any]) -> Word:
    ws, we, wt, wp = item[:4]
    speaker, channel, redacted = [*item[4:7], None, None, None][:3]
    return Word(
        start=float(ws),
        end=float(we),
        text=str(wt),
        probability=float(wp),
        speaker=speaker,
        channel=channel,
        redacted=redacted,
    )


def encode_segment(s: Segment) -> list[Any]:
    out: list[Any] = [round(s.start, 3), round(s.end, 3), s.text]
    extra = _trimmed([s.speaker, s.channel, s.language, s.translation])
    if s.confidence is not None or s.words is not None or extra:
        confidence = round(s.confidence, 4) if s.confidence is not None else None
        words = [encode_word(w) for w in s.words] if s.words is not None else None
        out += [confidence, words, *extra]
    return out


def decode_segment(item: list[Any]) -> Segment:
    start, end, text = item[:3]
    confidence = item[3] if len(item) > 3 else None
    words = item[4] if len(item) > 4 else None
    speaker, channel, language, translation = [*item[5:9], None, None, None, None][:4]
    return Segment(
        start=float(start),
        end=float(end),
        text=str(text),
        confidence=float(confidence) if confidence is not None else None,
        words=[decode_word(w) for w in words] if words is not None else None,
        speaker=speaker,
        channel=channel,
        language=language,
        translation=translation,
    )


def segments_of(data: dict[str, Any]) -> list[Segment]:
    return [decode_segment(item) for item in data["segments"]]


def encode_cutting(cutting: Cutting) -> bytes:
    return dumps({"format": FORMAT, "cutting": cutting.to_data()})


def decode_cutting(raw: bytes) -> Cutting:
    """Raises ValueError when `raw` is not a cutting of a known format."""
    try:
        data = json.loads(raw)
        if data.get("format") != FORMAT:
            raise ValueError(f"unknown format {data.get('format')!r}")
        return Cutting.from_data(data["cutting"])
    except (KeyError, TypeError, AttributeError, UnicodeDecodeError) as e:
        raise ValueError(f"not a cutting: {e}") from None


# --- transcripts ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    """What a complete transcript holds."""

    chunks: int
    duration: float
    engine: str
    words: int
    segments: int
    model: str | None = None
    model_digest: str | None = None
    language: str | None = None
    language_probability: float | None = None
    channels: int = 1  # transcribed on their own (`channels: split`)


@dataclass(frozen=True)
class Transcript:
    """A transcript: its segments in order (the text is derived), and who made it.

    `language`: asked for or detected (None for `auto` when the engine reported none);
    `language_probability` only when detected with one; `word_timings`: whether the job asked
    for words; `subtitles`: the job's srt and vtt rules by CRD field name (None: the defaults).
    """

    segments: list[Segment]
    duration: float
    engine: str
    job: str = ""
    namespace: str = ""
    uid: str = ""
    attempt: int = 0
    token: str = ""
    batch: str | None = None
    item: str | None = None
    language: str | None = None
    language_probability: float | None = None
    model: str | None = None
    model_digest: str | None = None
    word_timings: bool = False
    subtitles: dict[str, Any] | None = None
    redacted: list[str] | None = None  # the types redacted (`spec.transcript.redact.types`)

    @property
    def text(self) -> str:
        return text_of(self.segments)

    @property
    def words(self) -> int:
        return sum(len(s.text.split()) for s in self.segments)

    def encode(self) -> bytes:
        return dumps(
            {
                "format": TRANSCRIPT_FORMAT,
                "job": self.job,
                "namespace": self.namespace,
                "uid": self.uid,
                "attempt": self.attempt,
                "token": self.token,
                "batch": self.batch,
                "item": self.item,
                "language": self.language,
                "languageProbability": self.language_probability,
                "engine": self.engine,
                "model": self.model,
                "modelDigest": self.model_digest,
                "durationSeconds": self.duration,
                "words": self.words,
                "wordTimings": self.word_timings,
                "subtitles": self.subtitles,
                "redacted": self.redacted,
                "segments": [encode_segment(s) for s in self.segments],
            }
        )

    @classmethod
    def decode(cls, raw: bytes) -> Transcript:
        """Raises ValueError when `raw` is not a transcript of a known format."""
        try:
            data = json.loads(raw)
            if data.get("format") not in (1, 2, TRANSCRIPT_FORMAT):
                raise ValueError(f"unknown transcript format {data.get('format')!r}")
            probability = data.get("languageProbability")
            return cls(
                segments=segments_of(data),
                duration=float(data["durationSeconds"]),
                engine=str(data.get("engine") or ""),
                job=str(data.get("job") or ""),
                namespace=str(data.get("namespace") or ""),
                uid=str(data.get("uid") or ""),
                attempt=int(data.get("attempt") or 0),
                token=str(data.get("token") or ""),
                batch=data.get("batch"),
                item=data.get("item"),
                language=data.get("language"),
                language_probability=float(probability) if probability is not None else None,
                model=data.get("model"),
                model_digest=data.get("modelDigest"),
                word_timings=bool(data.get("wordTimings")),
                subtitles=data.get("subtitles"),
                redacted=data.get("redacted"),
            )
        except (KeyError, TypeError, AttributeError, UnicodeDecodeError) as e:
            raise ValueError(f"malformed transcript: {e}") from None
