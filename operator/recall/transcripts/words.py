"""The words of a transcript's segments as the outputs cut and label them. Pure.

- A segment's words come from its word timings when it has them (`timed_words`); a segment
  without (`words` None, empty or blank: the job did not ask, or the engine aligned no word) is
  split into its text's words in proportion to their characters over its time (`split`).
- A word Whisper split at a hyphen ("ill" + "-disposed") is one word here ("ill-disposed"), as
  is a word it wrote in pieces (a piece without its leading space: "example" + ".com"):
  `continues`, `goes_on`, `joined`.
- Each word carries who said it (its speaker, else its channel) and the language its segment was
  transcribed in, so subtitle cues (`recall.transcripts.subtitles`) and aws.json's items
  (`recall.transcripts.aws`) never mix two.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from recall.media.types import Segment


@dataclass(frozen=True)
class Token:
    """One word on its way into a cue: its text (no surrounding spaces) and times."""

    text: str
    start: float
    end: float
    segment_end: bool = False  # the last word of its segment
    who: str | None = None  # its speaker, else its channel
    lang: str | None = None  # the language its segment was transcribed in


def timed_words(segment: Segment) -> bool:
    """Whether `segment` has word timings of its own (`words` None, empty or blank: not)."""
    return any(w.text.strip() for w in segment.words or [])


def proportional(segments: list[Segment]) -> bool:
    """True when some segment with text has no word timings: its cues are split in proportion."""
    return any(not timed_words(s) and s.text.strip() for s in segments)


def continues(previous: str, word: str) -> bool:
    """Whether `word` (stripped) goes on the word before it without a space: Whisper splits
    "ill-disposed" into "ill" + "-disposed"."""
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
    return continues(previous, text) or (pieces and bool(text) and not raw[:1].isspace())


def joined(words: list[str]) -> str:
    """`words` (stripped) as text: one space between them, none inside a hyphenated word."""
    out = ""
    for word in words:
        out += word if not out or continues(out, word) else " " + word
    return out


def split(segment: Segment) -> list[Token]:
    """The words of `segment`'s text with times in proportion to their characters over the
    segment's time: for a segment without word timings."""
    parts = segment.text.split()
    weights = [len(p) + 1 for p in parts]
    total, at = sum(weights) or 1, 0
    span = max(0.0, segment.end - segment.start)
    out = []
    for part, weight in zip(parts, weights, strict=True):
        begin = segment.start + span * at / total
        at += weight
        end = segment.start + span * at / total
        out.append(Token(part, begin, end, who=segment.who, lang=segment.language))
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
                    words.append(Token(text, w.start, max(w.end, w.start), who=who, lang=lang))
        else:  # no word timings: in proportion
            words = split(s)
        if words:
            words[-1] = replace(words[-1], segment_end=True)
        out += words
    return out
