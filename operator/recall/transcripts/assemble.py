"""A transcript's segments from its chunk records: pieces held back at a seam put together, a
sentence cut by a chunk's end joined again, the channels of a split file interleaved. Pure.

Contract:
- Records are taken in order. A `carried` record begins with the rest of the previous record's
  (same channel's) last segment, cut by the hold rule: the two are one segment again.
- A record after one that `held` words begins with them: its seam (below) is at its chunk's own
  first segment, the first of its channel starting at or after the chunk's start (times of
  chunks cut at `SAMPLE_RATE`), so a redacted transcript has the seams an unredacted one has.
- Seams. Whisper marks both sides of a chunk's end mid-sentence with an ellipsis ("have..." /
  "...built a"). A segment ending in one followed (on its channel) by one beginning with one is
  one sentence: both marks go, from text and words, and the word after the seam is written as
  inside a sentence (lower case, unless "I" or a name: a word the transcript capitalises
  elsewhere mid-sentence). A full stop at a chunk's very end before a segment beginning in lower
  case goes too, and a capital at a chunk's start after a chunk that ended with no mark is
  lowered likewise. A mark the speech had (an ellipsis inside a chunk, "...and so on" after a
  full stop) is kept.
- A split file's segments are in order of their start times (stable among equal starts), so
  overlapping speech interleaves by time.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from recall.media import SAMPLE_RATE
from recall.media.media import CHANNEL_STRIDE
from recall.media.types import Segment, Word
from recall.transcripts.records import Record
from recall.transcripts.redact import text_of_words

ELLIPSES = ("...", "…")
CAPITAL_PRONOUNS = frozenset({"I", "I'm", "I've", "I'd", "I'll"})
ENDS = (".", "?", "!", ":", "…", '"', "'", ")", "”")  # what may end a sentence
STORED = 0.001  # seconds: a record's times are stored to the millisecond


def assemble(records: Sequence[Record]) -> list[Segment]:
    """The segments of `records` (see the module contract)."""
    out: list[Segment] = []
    seams: set[int] = set()  # indices in `out` of a record's first segment
    last_of: dict[str | None, int] = {}  # a channel's last segment in `out`
    held = False  # whether the record before held words back into this one
    for record in records:
        segments = list(record.segments)
        seam = own_first(record) if held else 0
        held = record.held is not None
        if record.carried and segments:
            at = last_of.get(segments[0].channel)
            if at is not None:
                out[at] = merged(out[at], segments.pop(0))
                seam -= 1
        for k, s in enumerate(segments):
            if k == seam:
                seams.add(len(out))
            last_of[s.channel] = len(out)
            out.append(s)
    names = capitalised(out)
    previous: dict[str | None, int] = {}
    for i, s in enumerate(out):
        if not s.text.strip():
            continue
        j = previous.get(s.channel)
        if j is not None:
            out[j], out[i] = joined(out[j], s, names, seam=i in seams)
        previous[s.channel] = i
    if any(s.channel for s in out):
        out.sort(key=lambda s: s.start)
    return out


def own_first(record: Record) -> int:
    """Where `record`'s chunk's own segments begin, after the words held back into it (said
    before its chunk's start, or on the channel before): see the module contract."""
    start = (record.first % CHANNEL_STRIDE) / SAMPLE_RATE - STORED
    return next(
        (
            k
            for k, s in enumerate(record.segments)
            if s.channel == record.channel and s.start >= start
        ),
        len(record.segments),
    )


def merged(a: Segment, b: Segment) -> Segment:
    """Two pieces of one segment as one (the translation is the one piece's that has it)."""
    words = None if a.words is None and b.words is None else [*(a.words or []), *(b.words or [])]
    text = text_of_words(words) if words else a.text.rstrip() + " " + b.text.strip()
    confidence = a.confidence if b.confidence is None else b.confidence
    translation = a.translation if a.translation is not None else b.translation
    return a.model_copy(update={"end": max(a.end, b.end), "text": text, "words": words,
                                "confidence": confidence, "translation": translation})  # fmt: skip


def capitalised(segments: list[Segment]) -> set[str]:
    """Words written with a capital inside a sentence somewhere: names, kept as they are."""
    out: set[str] = set()
    for s in segments:
        words = s.text.split()
        for before, word in itertools.pairwise(words):
            if word[:1].isupper() and not before.endswith((".", "?", "!", *ELLIPSES, ":")):
                out.add(word.strip(".,;:!?\"'"))
    return out


def _strip_end(word: Word, marks: tuple[str, ...]) -> Word:
    text = word.text.rstrip()
    for mark in marks:
        if text.endswith(mark):
            return word.model_copy(update={"text": text[: -len(mark)]})
    return word


def _start_after_seam(text: str, names: set[str], *, mark: bool = True) -> str:
    """`text` without its leading ellipsis (`mark`), its first letter as inside a sentence."""
    lead = text[: len(text) - len(text.lstrip())]
    body = text.lstrip()
    for ellipsis in ELLIPSES if mark else ():
        if body.startswith(ellipsis):
            body = body[len(ellipsis) :].lstrip()
            break
    bare = body.split(" ", 1)[0].strip(".,;:!?\"'")
    if body[:1].isupper() and bare not in CAPITAL_PRONOUNS and bare not in names:
        body = body[:1].lower() + body[1:]
    return lead + body


def joined(a: Segment, b: Segment, names: set[str], *, seam: bool) -> tuple[Segment, Segment]:
    """`a` and the segment after it, `b`, with the marks of a cut between them removed (see
    the module contract); unchanged when nothing was cut there."""
    tail, head = a.text.rstrip(), b.text.lstrip()
    cut = tail.endswith(ELLIPSES) and head.startswith(ELLIPSES)
    stop = seam and tail.endswith(".") and not tail.endswith(ELLIPSES) and head[:1].islower()
    going_on = seam and bool(tail) and not tail.endswith(ENDS) and head[:1].isupper()
    if cut or stop:
        a = _edit_last(a, ELLIPSES if cut else (".",))
    if cut or going_on:
        b = _edit_first(b, names)
    return a, b


def _edit_last(s: Segment, marks: tuple[str, ...]) -> Segment:
    words = list(s.words or [])
    spoken = [k for k, w in enumerate(words) if w.text.strip()]
    if spoken:
        words[spoken[-1]] = _strip_end(words[spoken[-1]], marks)
    text = s.text.rstrip()
    for mark in marks:
        if text.endswith(mark):
            text = text[: -len(mark)]
            break
    return s.model_copy(update={"text": text, "words": words if s.words is not None else None})


def _edit_first(s: Segment, names: set[str]) -> Segment:
    words = list(s.words or [])
    spoken = [k for k, w in enumerate(words) if w.text.strip()]
    for n, k in enumerate(spoken[:2]):  # a lone "..." word: the capital is the next one's
        text = _start_after_seam(words[k].text, names, mark=n == 0)
        words[k] = words[k].model_copy(update={"text": text})
        if text.strip():
            break
    text = _start_after_seam(s.text, names)
    return s.model_copy(update={"text": text, "words": words if s.words is not None else None})
