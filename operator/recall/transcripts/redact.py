"""Redaction: what must not be kept (found by `recall.transcripts.entities`), replaced before
anything is written. Pure.

A redacted span is one word: `[EMAIL]`, `[PHONE]`, `[CARD]`, `[IBAN]`, `[NATIONAL_ID]` (the
punctuation around it kept), from its first word's start to its last word's end, with the
lowest probability of its words, the first word's speaker and channel, and `redacted` its type.

The hold rule (`hold`): a chunk record keeps back its last `HOLD_WORDS` words and, before them,
every word that could be part of an entity (`entities.could_be_part`), up to `MOST_HELD`; they
are redacted with the next chunk's words and stored in its record, so an entity across a seam
is found whole. The last chunk holds nothing back.

Translations (`transcript.translate`): the segments' English texts are redacted together, as
the words are (an entity across two goes in the first one's tag). The hold rule keeps a
translation with its segment's last piece, and holds back a whole segment whose translation
ends in what could be part of an entity, so no record stores a piece of one.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection
from typing import TypeVar

from recall.media.types import Segment, Word
from recall.resources import RedactType
from recall.transcripts.entities import EDGE, core, could_be_part, detect, glued, unspaced_at
from recall.transcripts.words import UNSPACED, apart, split, within

T = TypeVar("T")
HOLD_WORDS = 8
MOST_HELD = 64
TAGS: dict[str, str] = {
    "email": "[EMAIL]",
    "phone": "[PHONE]",
    "card": "[CARD]",
    "iban": "[IBAN]",
    "nationalId": "[NATIONAL_ID]",
}


# --- applying it to segments ----------------------------------------------------------------


def timed(segment: Segment) -> list[Word]:
    """`segment`'s words; for one without word timings, its text's words timed in proportion
    (with the segment's confidence), a word cut where its script changes ("は" | "anna@example.com",
    "5551234567" | "。": a word of Chinese or Japanese takes the letters after it)."""
    if any(w.text.strip() for w in segment.words or []):
        return list(segment.words or [])
    p = segment.confidence if segment.confidence is not None else 1.0
    out: list[Word] = []
    for t in split(segment):  # a space before each word that has one (none inside unspaced text)
        pieces = ["".join(g) for _, g in itertools.groupby(t.text, lambda ch: within(ch, UNSPACED))]
        at, span = t.start, (t.end - t.start) / max(len(t.text), 1)
        for n, piece in enumerate(pieces):
            end = t.end if n == len(pieces) - 1 else at + span * len(piece)
            text = " " * (t.space and n == 0) + piece
            out.append(Word(start=at, end=end, text=text, probability=p))
            at = end
    return out


def text_of_words(words: list[Word]) -> str:
    """A segment's text from its words: as written when they carry their spaces (Whisper's, and
    Whisper's Chinese or Japanese, which has none), else joined by one space (none between two
    words of a script written without spaces)."""
    if any(w.text[:1].isspace() for w in words if w.text.strip()):
        return "".join(w.text for w in words)
    if any(unspaced_at(w.text, k) for w in words for k in range(len(w.text))):
        return " " + "".join(w.text.strip() for w in words)
    out = ""
    for word in (w.text.strip() for w in words):
        if word:
            out += word if not out or not apart(out, word) else " " + word
    return " " + out


def _tag_text(span: list[str], kind: RedactType) -> str:
    """The tag of the words `span`: the first's leading space and the punctuation before it,
    the tag, the punctuation after the last."""
    first, last = span[0], span[-1]
    lead = first[: len(first) - len(first.lstrip())]
    before = first.strip()[: len(first.strip()) - len(first.strip().lstrip(EDGE))]
    after = last.strip()[len(last.strip().rstrip(EDGE)) :]
    return f"{lead}{before}{TAGS[kind]}{after}"


def _tag(words: list[Word], kind: RedactType) -> Word:
    return Word(
        start=words[0].start,
        end=max(w.end for w in words),
        text=_tag_text([words[0].text, words[-1].text], kind),
        probability=min(w.probability for w in words),
        speaker=words[0].speaker,
        channel=words[0].channel,
        redacted=kind,
    )


def redact(segments: list[Segment], types: Collection[str]) -> list[Segment]:
    """`segments` and their translations with every entity of `types` replaced by its tag (see
    the module contract), in the first segment it spans; times kept, an emptied translation None."""
    found = _redact_words(segments, types)
    translations = redact_texts([s.translation or "" for s in found], types)
    return [
        s if (s.translation or "") == t else s.model_copy(update={"translation": t or None})
        for s, t in zip(found, translations, strict=True)
    ]


def redact_texts(texts: list[str], types: Collection[str]) -> list[str]:
    """`texts` (segments' texts, in order) with every entity of `types` replaced by its tag, the
    punctuation around it kept; one across texts is tagged in the first ("" for a text left
    empty). A changed text keeps its leading space; its words are joined by one space."""
    words = _tagged([text.split() for text in texts], types, str, _tag_text)
    return [
        (text[: len(text) - len(text.lstrip())] + " ".join(words[i]) if words[i] else "")
        if i in words
        else text
        for i, text in enumerate(texts)
    ]


def _redact_words(segments: list[Segment], types: Collection[str]) -> list[Segment]:
    words = _tagged([timed(s) for s in segments], types, lambda w: w.text, _tag)
    return [
        s.model_copy(
            update={"words": words[i], "text": text_of_words(words[i]) if words[i] else ""}
        )
        if i in words
        else s
        for i, s in enumerate(segments)
    ]


def _tagged(
    groups: list[list[T]],
    types: Collection[str],
    text: Callable[[T], str],
    tag: Callable[[list[T], RedactType], T],
) -> dict[int, list[T]]:
    """The groups (a segment's words) that hold an entity of `types`, by index, each entity
    replaced by `tag` of its words in the group of its first word (`text`: a word as written)."""
    flat = [(i, word) for i, group in enumerate(groups) for word in group]
    found = detect([text(word) for _, word in flat], types)
    starts = {f.first: f for f in found}
    dropped = {k for f in found for k in range(f.first + 1, f.end)}
    out: dict[int, list[T]] = {flat[k][0]: [] for f in found for k in range(f.first, f.end)}
    for k, (i, word) in enumerate(flat):
        if i in out and k not in dropped:
            f = starts.get(k)
            out[i].append(word if f is None else tag([w for _, w in flat[f.first : f.end]], f.kind))
    return out


def hold(segments: list[Segment]) -> tuple[list[Segment], list[Segment], bool]:
    """`segments` cut where the hold rule says: (what the record stores now, what is held
    back, whether the first held segment continues the last stored one). The translation of
    a segment cut in two goes with the piece held back."""
    words = [timed(s) for s in segments]
    flat = [(i, k) for i, ws in enumerate(words) for k in range(len(ws))]
    if not flat:
        return segments, [], False
    h = _held_from([words[i][k].text for i, k in flat])
    firsts = {i: n for n, (i, k) in reversed(list(enumerate(flat)))}  # a segment's first word
    while h > 0 and len(flat) - h < MOST_HELD:  # a translation that may go on: held too
        n = firsts[flat[h][0]]  # the last segment kept whole ends before word n
        if n == 0 or not _translation_goes_on(segments[flat[n - 1][0]]):
            break
        h = firsts[flat[n - 1][0]]
    if h == 0:
        return [], segments, False
    i, k = flat[h]
    kept = segments[:i]
    held = segments[i + 1 :]
    s = segments[i]
    if k == 0:
        return kept, [s, *held], False
    before, after = words[i][:k], words[i][k:]
    first = s.model_copy(
        update={
            "words": before,
            "text": text_of_words(before),
            "end": before[-1].end,
            "translation": None,
        }
    )
    second = s.model_copy(
        update={"words": after, "text": text_of_words(after), "start": after[0].start}
    )
    return [*kept, first], [second, *held], True


def _held_from(texts: list[str]) -> int:
    """Where the words held back begin among `texts` (a chunk's words, in order)."""
    cores = [core(t) for t in texts]
    h = max(0, len(texts) - HOLD_WORDS)
    while h > 0 and len(texts) - h < MOST_HELD and could_be_part(cores, h - 1):
        h -= 1
    starts = {first for first, _, _ in glued(texts)}
    while h > 0 and h not in starts:
        h -= 1  # a written word is never cut ("example" + ".com", "anna" + "@" + "ex" ...)
    return h


def _translation_goes_on(segment: Segment) -> bool:
    """Whether `segment`'s translation ends in what could be part of an entity."""
    cores = [core(w) for w in (segment.translation or "").split()]
    return bool(cores) and could_be_part(cores, len(cores) - 1)
