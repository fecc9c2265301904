"""What media is cut into and with: the types the engines and the transcript store share with
the media package.

Contract (the cutting): chunks are in order, contiguous, and each records its sample range
(`first`, `end`, at `Media.cutting.rate`). The same source cut with the same `Cutting` always
yields the same chunks, so a `Resume` from chunk `k` (`Chunk.resume()`) continues at the first
sample after it: no gap, no overlap. A resume is valid only with an equal `Cutting`
(`Cutting.differences` says why not).
"""

from __future__ import annotations

import abc
import math
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from recall.resources import Model


class Word(Model):
    """One word of a segment: its times (seconds) and the model's probability for it."""

    start: float
    end: float
    text: str  # as the model wrote it: a leading space, punctuation attached ("Hello,")
    probability: float
    speaker: str | None = None  # "S1", "S2", ... in order of first appearance in the file
    channel: str | None = None  # "ch0", "ch1", ... with `channels: split`
    redacted: str | None = None  # the type of a redacted span ("phone"): `text` is "[PHONE]"

    def shifted(self, seconds: float) -> Word:
        return self.model_copy(update={"start": self.start + seconds, "end": self.end + seconds})

    @property
    def who(self) -> str | None:
        """Who said it, as the outputs label it: the speaker, else the channel."""
        return self.speaker or self.channel


class Segment(Model):
    """A stretch of speech: times in seconds, its text, and optionally the model's confidence
    in it (0-1) and its words with their own times (`spec.transcript.words`)."""

    start: float
    end: float
    text: str
    confidence: float | None = None
    words: list[Word] | None = None
    speaker: str | None = None  # the speaker of most of its words (speaker labels)
    channel: str | None = None  # the channel it was transcribed from (`channels: split`)
    language: str | None = None  # the language it was transcribed in (`languageScope: segment`)
    translation: str | None = None  # its English translation (`transcript.translate: en`)

    @property
    def who(self) -> str | None:
        """Who said it, as the outputs label it: the speaker, else the channel."""
        return self.speaker or self.channel

    def shifted(self, seconds: float) -> Segment:
        """The same segment `seconds` later (an engine's chunk-relative times made absolute),
        its words with it."""
        update: dict[str, Any] = {"start": self.start + seconds, "end": self.end + seconds}
        if self.words is not None:
            update["words"] = [w.shifted(seconds) for w in self.words]
        return self.model_copy(update=update)


def text_of(segments: Iterable[Segment]) -> str:
    """The text of `segments`, each stripped, joined by one space (blank ones left out): what
    a transcript reads, and the context the engine is given for the chunk after them."""
    return " ".join(s.text.strip() for s in segments if s.text.strip())


@dataclass(frozen=True)
class Cutting:
    """What a media is cut with. Two cuttings are compatible only when equal."""

    chunk_seconds: float
    snap_seconds: float
    rate: int
    source: str  # a fingerprint of the source's bytes (size and mtime, or a content hash)

    @property
    def chunk_samples(self) -> int:
        return max(1, round(self.chunk_seconds * self.rate))

    def differences(self, other: Cutting) -> list[str]:
        """What differs from `other`, in words (empty when equal)."""
        out = []
        for name in ("chunk_seconds", "snap_seconds", "rate"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine != theirs:
                out.append(f"{name} {theirs:g} → {mine:g}")
        if self.source != other.source:
            out.append("the source changed")
        return out

    def to_data(self) -> dict[str, Any]:
        return {
            "chunkSeconds": self.chunk_seconds,
            "snapSeconds": self.snap_seconds,
            "rate": self.rate,
            "source": self.source,
        }

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> Cutting:
        return cls(
            chunk_seconds=float(data["chunkSeconds"]),
            snap_seconds=float(data["snapSeconds"]),
            rate=int(data["rate"]),
            source=str(data["source"]),
        )


@dataclass(frozen=True)
class Resume:
    """Where a resumed iteration starts: chunk `chunks` at sample `position`. `tail` signs the
    samples just before `position` as first decoded (`recall.media.decode.tail_signature`); a
    media that seeks checks it; "" means unknown."""

    chunks: int
    position: int
    tail: str = ""


@dataclass(frozen=True)
class Chunk:
    """One piece of the media: `index` from 0, `start` and `duration` in seconds, the sample
    range [`first`, `end`) at the cutting's rate, `tail` signing the samples just before `end`,
    `last` True on the final chunk. A file split into channels is cut channel after channel:
    `first`/`end` count on from the previous channel's, and `start` is the time in the file.
    """

    index: int
    start: float
    duration: float
    audio: Any = field(default=None, repr=False)  # float32 mono 16 kHz samples, or None
    first: int = 0
    end: int = 0
    tail: str = ""
    last: bool = False
    channel: str | None = None  # "ch0", "ch1", ... of a file split into channels

    def resume(self) -> Resume:
        """The resume point right after this chunk."""
        return Resume(chunks=self.index + 1, position=self.end, tail=self.tail)


class Media(abc.ABC):
    """A source opened for cutting. Use as a context manager; iterate `chunks` once."""

    cutting: Cutting
    estimated_samples: int | None  # from the container; None when it does not say
    decoded_samples: int | None = None  # the exact length, once an iteration has ended

    @abc.abstractmethod
    def chunks(
        self, resume: Resume | None = None, cancel: threading.Event | None = None
    ) -> Iterator[Chunk]:
        """The chunks after `resume` (all of them without it), decoded lazily."""

    def close(self) -> None:  # noqa: B027 - media without resources need nothing
        """Release what the media holds (a downloaded file); idempotent."""

    @property
    def duration(self) -> float:
        """Seconds: exact once an iteration has ended, else the container's estimate."""
        samples = self.estimated_samples if self.decoded_samples is None else self.decoded_samples
        return (samples or 0) / self.cutting.rate

    def chunks_total(self, done: int, position: int, *, finished: bool = False) -> int:
        """An honest chunk count after `done` chunks ending at sample `position`: exact when
        `finished`, else `done` plus what the estimated rest needs (at least one). Snapped cuts
        make chunks shorter, so the count may grow as work goes on."""
        if finished:
            return done
        rest = (self.estimated_samples or 0) - position
        return done + max(1, math.ceil(rest / self.cutting.chunk_samples))

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
