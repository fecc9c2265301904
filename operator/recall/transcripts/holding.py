"""The hold rule from one chunk record to the next, and the text the engine is prompted with. Pure.

Contract:
- `step` is the hold rule (`recall.transcripts.redact`) over one chunk: its record stores the
  words held from the record before and its own but those it holds into the next; without
  redaction, every word. Nothing is held across channels: the first chunk of a channel's record
  stores the words the channel before held (even when it has none of its own), so a record's
  `held` is always a time of its own channel. Words held again by a record that stores none
  still continue the segment they were cut from. A chunk of a retake
  (`recall.transcripts.checkpoint`) gives no record: its words from the held time on are held
  for the next.
- `Prompt` gives each chunk's context: the stored text (redacted, without its held words) of
  the last record that has text. A resume starts from the same text read back
  (`Checkpoint.context`), so it prompts as an unbroken run does, and nothing unredacted is ever
  a redacting job's context. The cost: the chunk after held words is prompted without them (up
  to `HOLD_WORDS` words and any entity before them).
- Held words live only in memory, unredacted, until the record that stores them is redacted.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from recall.media.types import Chunk, Segment, text_of
from recall.transcripts.checkpoint import Checkpoint
from recall.transcripts.redact import hold, redact, text_of_words, timed


@dataclass(frozen=True)
class Holding:
    """What the hold rule carries to the next record: the words held back, whether the first
    of them continues the last stored segment (`piece`), and a retake's chunks [first, end)
    whose words from `since` on are held again."""

    pending: tuple[Segment, ...] = ()
    piece: bool = False
    retake: tuple[int, int, float] | None = None

    @classmethod
    def resuming(cls, checkpoint: Checkpoint | None) -> Holding:
        """An attempt's first holding: a retake when `checkpoint`'s last record held words."""
        if checkpoint is None or not checkpoint.retake:
            return cls()
        since = checkpoint.records[-1].held
        assert since is not None
        n = len(checkpoint.records)
        return cls(retake=(n - checkpoint.retake, n, since))


@dataclass(frozen=True)
class Cut:
    """What one chunk record stores, unredacted: the held words of a channel that ended
    (redacted on their own), then the record's own; where the words it holds back begin, and
    whether its first segment continues the previous record's last (`carried`)."""

    ended: list[Segment]
    kept: list[Segment]
    held: float | None = None
    carried: bool = False


def step(
    holding: Holding, chunk: Chunk, segments: list[Segment], *, redacting: bool
) -> tuple[Holding, Cut | None]:
    """The hold rule over `chunk` and its `segments` (labelled here with its channel): the holding
    for the next chunk, and what its record stores (None for a chunk of a retake)."""
    if chunk.channel:
        segments = [labelled(s, chunk.channel) for s in segments]
    if holding.retake is not None and chunk.index < holding.retake[1]:
        first, end, since = holding.retake
        words, piece = from_time(segments, since)
        if chunk.index != first:
            words, piece = [*holding.pending, *words], holding.piece
        retake = None if chunk.index == end - 1 else holding.retake
        return Holding(tuple(words), piece, retake), None
    if not redacting:
        return holding, Cut(ended=[], kept=segments)
    carried = holding.piece and bool(holding.pending)
    pending, ended = list(holding.pending), []
    if pending and pending[-1].channel != chunk.channel:  # a channel ended: store its words
        ended, pending = pending, []
    whole = [*pending, *segments]
    kept, held, piece = (whole, [], False) if chunk.last else hold(whole)
    if pending and not kept:  # held again whole: the first still continues the last stored
        piece = holding.piece
    at = held[0].start if held else None
    return Holding(tuple(held), piece), Cut(ended, kept, held=at, carried=carried)


def stored(cut: Cut, types: Collection[str] | None) -> list[Segment]:
    """The segments a record stores for `cut`: redacted with `types`, when given."""
    if types is None:
        return [*cut.ended, *cut.kept]
    return [*redact(cut.ended, types), *redact(cut.kept, types)]


@dataclass
class Prompt:
    """The engine's context before each chunk (see the module contract)."""

    types: Collection[str] | None
    holding: Holding = field(default_factory=Holding)
    texts: tuple[str, ...] = ()  # the text of each record a resume carries
    text: str = ""

    @classmethod
    def of(cls, types: Collection[str] | None, checkpoint: Checkpoint | None = None) -> Prompt:
        """The prompt of an attempt redacting `types` (None: none), resuming from `checkpoint`."""
        if checkpoint is None:
            return cls(types)
        texts = tuple(r.text for r in checkpoint.records)
        return cls(types, Holding.resuming(checkpoint), texts, checkpoint.context)

    def after(self, chunk: Chunk, segments: list[Segment]) -> str:
        """The context for the chunk after `chunk`, given what `chunk` was transcribed as."""
        self.holding, cut = step(self.holding, chunk, segments, redacting=self.types is not None)
        if cut is None:  # a retake's chunk: its record is the checkpoint's
            text = self.texts[chunk.index] if chunk.index < len(self.texts) else ""
        else:
            text = text_of(stored(cut, self.types))
        self.text = text or self.text
        return self.text


def labelled(segment: Segment, channel: str) -> Segment:
    """`segment` and its words labelled with `channel`."""
    words = [w.model_copy(update={"channel": channel}) for w in segment.words or []]
    update = {"channel": channel, "words": words if segment.words is not None else None}
    return segment.model_copy(update=update)


def from_time(segments: list[Segment], at: float) -> tuple[list[Segment], bool]:
    """The words of `segments` from `at` on (a retake's held words), and whether the first
    continues a segment; a segment without word timings is timed as the hold rule did (`timed`)."""
    out: list[Segment] = []
    piece = False
    for s in segments:
        every = timed(s)
        words = [w for w in every if w.start >= at - 0.05]
        if words:
            if not out and len(words) < len(every):
                piece = True
            out.append(
                s.model_copy(
                    update={"words": words, "text": text_of_words(words), "start": words[0].start}
                )
            )
        elif not every and s.start >= at - 0.05:
            out.append(s)
    return out, piece
