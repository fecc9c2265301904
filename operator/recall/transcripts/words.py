"""The words of a transcript's segments as the outputs cut and label them. Pure.

- A segment's words come from its word timings when it has them (`timed_words`); a segment
  without (the job did not ask, or the engine aligned no word) is split into its text's words
  in proportion to their characters over its time (`split`).
- A word Whisper split at a hyphen ("ill" + "-disposed") or wrote in pieces (a piece without
  its leading space: "example" + ".com") is one word here (`goes_on`).
- In scripts written without spaces (Chinese, Japanese, Thai, Lao, Myanmar, Khmer: `UNSPACED`)
  each word Whisper gave stays a word, with a space before it only where Whisper wrote one
  (`Token.space`); such a segment without word timings is split into its Chinese and Japanese
  characters. A wide character is two columns (`width`).
- Each word carries who said it (its speaker, else its channel) and its segment's language, so
  subtitle cues and aws.json's items never mix two.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from unicodedata import east_asian_width

from recall.media.types import Segment

# Unicode blocks of the scripts written without spaces between words, and their punctuation.
UNSPACED = (
    (0x0E00, 0x0EFF),  # Thai, Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x2E80, 0x2FDF),  # CJK radicals
    (0x3000, 0x31FF),  # CJK punctuation, Hiragana, Katakana, Bopomofo
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF00, 0xFFEF),  # fullwidth and halfwidth forms
    (0x20000, 0x3FFFF),  # CJK extensions B and after
)
CHARACTERS = ((0x2E80, 0x9FFF), (0xF900, 0xFAFF), (0xFF00, 0xFFEF), (0x20000, 0x3FFFF))
# Marks a Chinese or Japanese line does not begin with: closing punctuation, the prolonged
# sound mark, small kana.
NO_LINE_START = frozenset(
    "、。，．！？）」』】〕〉》：；”’ー…ゝゞヽヾぁぃぅぇぉっゃゅょゎァィゥェォッャュョヮヵヶ"
)


def within(ch: str, blocks: tuple[tuple[int, int], ...]) -> bool:
    """Whether `ch` is in one of the Unicode `blocks` (`UNSPACED`, `CHARACTERS`)."""
    return any(low <= ord(ch) <= high for low, high in blocks)


def apart(left: str, right: str) -> bool:
    """Whether a space goes between words `left` and `right` (none inside an unspaced script)."""
    return not (left and right and within(left[-1], UNSPACED) and within(right[0], UNSPACED))


@dataclass(frozen=True)
class Token:
    """One word on its way into a cue: its text (no surrounding spaces) and times."""

    text: str
    start: float
    end: float
    segment_end: bool = False  # the last word of its segment
    space: bool = True  # a space before it, after the word before (none inside unspaced text)
    who: str | None = None  # its speaker, else its channel
    lang: str | None = None  # the language its segment was transcribed in


def timed_words(segment: Segment) -> bool:
    return any(w.text.strip() for w in segment.words or [])


def continues(previous: str, word: str) -> bool:
    """Whether `word` (stripped) goes on the one before without a space ("ill" + "-disposed")."""
    if len(word) > 1 and word[0] == "-" and word[1].isalnum():
        return bool(previous) and previous[-1].isalnum()
    return (
        len(previous) > 1 and previous[-1] == "-" and previous[-2].isalnum() and word[:1].isalnum()
    )


def spaced(segment: Segment) -> bool:
    """Whether `segment`'s words are written as Whisper writes them, each with its leading
    space: then a piece without one goes on the word before it ("example" + ".com")."""
    return any(w.text[:1].isspace() for w in segment.words or [])


def goes_on(previous: str, raw: str, *, pieces: bool) -> bool:
    """Whether the word `raw` (as written) is part of the word before it (`previous`,
    stripped): a hyphen-split word, or a piece without its leading space when `pieces`."""
    text = raw.strip()
    if not apart(previous, text):
        return False  # each its own word, written against the one before (`Token.space`)
    return continues(previous, text) or (pieces and bool(text) and not raw[:1].isspace())


def text_of(words: list[Token]) -> str:
    return "".join((" " if k and w.space else "") + w.text for k, w in enumerate(words))


def width(text: str) -> int:
    """`text`'s width on screen in columns: a wide (Chinese, Japanese, Korean) character two."""
    return len(text) + sum(1 for ch in text if east_asian_width(ch) in "WF")


def parts_of(text: str) -> list[tuple[str, bool]]:
    """`text`'s words, each with whether a space comes before it: split at spaces, and Chinese or
    Japanese runs into characters (a line may break between any two), a mark that may not begin
    a line (`NO_LINE_START`) or another script's letter kept with the character before it."""
    out: list[tuple[str, bool]] = []
    for part in text.split():
        pieces: list[str] = []
        for ch in part:
            if not pieces or (within(ch, CHARACTERS) and ch not in NO_LINE_START):
                pieces.append(ch)
            else:
                pieces[-1] += ch
        out += [(piece, k == 0) for k, piece in enumerate(pieces)]
    return out


def split(segment: Segment) -> list[Token]:
    """The words of `segment`'s text, timed in proportion to their characters over the segment."""
    parts = parts_of(segment.text)
    weights = [len(p) + 1 for p, _ in parts]
    total, at = sum(weights) or 1, 0
    span = max(0.0, segment.end - segment.start)
    out = []
    for (part, space), weight in zip(parts, weights, strict=True):
        begin = segment.start + span * at / total
        at += weight
        end = segment.start + span * at / total
        out.append(Token(part, begin, end, space=space, who=segment.who, lang=segment.language))
    return out


def tokens(segments: list[Segment]) -> list[Token]:
    """Every word of `segments` in order, with its times and who said it (see the module
    contract); a word split at a hyphen is one."""
    out: list[Token] = []
    for s in segments:
        words: list[Token] = []
        if timed_words(s):
            pieces, lang = spaced(s), s.language
            for w in s.words or []:
                text = w.text.strip()
                if not text:
                    continue
                who = w.who or s.who
                last = words[-1] if words else None
                if (
                    last is not None
                    and last.who == who
                    and goes_on(last.text, w.text, pieces=pieces)
                ):
                    words[-1] = replace(last, text=last.text + text, end=max(w.end, last.end))
                else:
                    # Unspaced text has a space only where Whisper wrote one.
                    space = apart(last.text, text) or w.text[:1].isspace() if last else True
                    words.append(
                        Token(text, w.start, max(w.end, w.start), space=space, who=who, lang=lang)
                    )
        else:
            words = split(s)
        if words:
            words[-1] = replace(words[-1], segment_end=True)
        out += words
    return out
