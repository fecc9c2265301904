"""Subtitle cues cut from a transcript's words under the usual rules, written by pysubs2. Pure.

Contract:
- The words are `recall.transcripts.words`'s; a segment without word timings is timed in
  proportion, so its cues are only as precise as the segment.
- Every cue is at most `max_lines` lines of at most `max_line_characters` characters (a single
  word longer than a line is the one exception: it stands alone, over-long), is shown at most
  `max_cue_seconds`, at least `min_cue_seconds` where the next cue (and the end of the audio,
  when `cues` is given its duration) leaves room, and starts at least `min_gap_seconds` after
  the previous one ends. Cues never overlap and are in order, but in a file split by channel:
  each channel's cues are cut on their own and never overlap one another, and the cues are in
  order of their start (two channels may speak at once).
- Breaks are chosen over the whole transcript at once (a shortest path over the word
  boundaries): after a sentence's end first, then after a clause, then at a pause, a segment's
  end, and last between any two words (never after an article or a preposition when another
  break is possible). Fuller cues beat more cues. Lines break the same way inside a cue, as
  evenly as the breaks allow.
- A cue never holds the words of two speakers (else channels) nor of two languages (a
  segment's own: `languageScope: segment`, a translation). `write` gives a WebVTT cue its voice
  tag (`<v S1>`) and language span (`<lang de>…</lang>`, inside the tag); SubRip has no
  language markup. With `prefix` (SubRip) the first cue after each change of speaker, and in a
  split file every cue, begins with `S1: `, which counts toward its line.
- Times are whole milliseconds. `bench.cues.check` re-states the rules for tests and benchmarks.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from functools import cache
from typing import Any, Literal

import pysubs2

from recall.media.types import Segment
from recall.resources import SubtitleSpec
from recall.transcripts.words import Token, text_of, tokens
from recall.transcripts.words import width as columns

SENTENCE_END = (".", "?", "!", "…", '."', '?"', '!"', ".'", "?'", "!'", "。", "！", "？", "。」")
CLAUSE_END = (",", ";", ":", "—", "–", '"', ")", "、", "，", "；", "：", "」", "）")
# Words a line or a cue should not end with while another break is possible.
_WEAK = (
    "a an the of to in on at by for from with and or but that as is was his her its their my "
    "our your this these those"
)
WEAK_ENDS = frozenset(_WEAK.split())
PAUSE_SECONDS = 0.5  # silence between two words that reads as a pause
# Costs of a break after a word, by what follows it: lower is better.
COST_SENTENCE, COST_CLAUSE, COST_PAUSE, COST_SEGMENT, COST_ANY, COST_WEAK = 0, 2, 2, 3, 6, 9
COST_CUE = 3  # every cue costs this: fuller cues beat more cues
COST_SHORT = 4  # a cue under a third of a line and a second: a flash on screen
BACKSLASH = "\ue000"  # a text's backslash while pysubs2 writes it (a private-use character)


@dataclass(frozen=True)
class Rules:
    """The rules cues follow; defaults as broadcasters and streaming services use them."""

    max_line_characters: int = 42
    max_lines: int = 2
    max_cue_seconds: float = 7.0
    min_cue_seconds: float = 1.0
    min_gap_seconds: float = 0.083  # two frames at 24 fps

    @classmethod
    def of(cls, spec: SubtitleSpec | None) -> Rules:
        return cls(**spec.model_dump(exclude_none=True)) if spec is not None else cls()

    def to_data(self) -> dict[str, Any]:
        """The CRD's field names (camelCase), as `SubtitleSpec` dumps them."""
        return SubtitleSpec(**asdict(self)).model_dump(by_alias=True)

    @classmethod
    def from_data(cls, data: dict[str, Any] | None) -> Rules:
        return cls.of(SubtitleSpec.model_validate(data)) if data else cls()


@dataclass(frozen=True)
class Cue:
    start: float
    end: float
    lines: tuple[str, ...]
    who: str | None = None
    lang: str | None = None
    channel: str | None = None  # of a file split by channel: its cues may overlap another's

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def labelled(words: list[Token]) -> list[Token]:
    """`words` with `who: ` before the first word of each change of who said them."""
    out: list[Token] = []
    for k, w in enumerate(words):
        if w.who and (k == 0 or words[k - 1].who != w.who):
            w = replace(w, text=f"{w.who}: {w.text}")
        out.append(w)
    return out


def _break_cost(words: list[Token], k: int) -> int:
    """The cost of breaking after word `k` (the last word costs nothing)."""
    if k == len(words) - 1:
        return 0
    word = words[k]
    text = word.text
    if text.endswith(SENTENCE_END):
        return COST_SENTENCE
    cost = COST_ANY
    if text.endswith(CLAUSE_END):
        cost = COST_CLAUSE
    if words[k + 1].start - word.end >= PAUSE_SECONDS:
        cost = min(cost, COST_PAUSE)
    if word.segment_end:
        cost = min(cost, COST_SEGMENT)
    if cost == COST_ANY and text.lower().strip("\"'") in WEAK_ENDS:
        cost = COST_WEAK
    return cost


def _line_cost(words: list[str], k: int) -> int:
    """The cost of a line break after word `k` of a cue's words."""
    text = words[k]
    if text.endswith(SENTENCE_END):
        return 0
    if text.endswith(CLAUSE_END):
        return 1
    if text.lower() in WEAK_ENDS:
        return 6
    return 3


def lines(
    words: list[str], width: int, most: int, spaces: list[bool] | None = None
) -> tuple[str, ...] | None:
    """`words` in at most `most` lines of at most `width` columns (`words.width`), broken where
    it reads best and as evenly as possible; None when they do not fit (a lone over-long word is
    one line). `spaces`: whether a space goes before each word (default: all)."""
    tokens = [
        Token(w, 0.0, 0.0, space=True if spaces is None else spaces[k]) for k, w in enumerate(words)
    ]

    def line(i: int, j: int) -> str:
        return text_of(tokens[i:j])

    if len(words) == 1:
        return (words[0],)
    if columns(line(0, len(words))) <= width:
        return (line(0, len(words)),)
    n = len(words)

    @cache
    def best(i: int, left: int) -> tuple[float, tuple[str, ...]] | None:
        # The best layout of words[i:] in at most `left` lines.
        if left == 0:
            return None
        found: tuple[float, tuple[str, ...]] | None = None
        for j in range(i + 1, n + 1):
            length = columns(line(i, j))
            if length > width and j > i + 1:
                break  # (a lone word longer than a line is a line of its own)
            if j == n:
                candidate: tuple[float, tuple[str, ...]] = (0.0, (line(i, j),))
            else:
                rest = best(j, left - 1)
                if rest is None:
                    continue
                slack = (width - length) / width
                cost = rest[0] + _line_cost(words, j - 1) + 4 * slack * slack
                candidate = (cost, (line(i, j), *rest[1]))
            if found is None or candidate[0] < found[0]:
                found = candidate
        return found

    layout = best(0, most)
    return layout[1] if layout else None


def cues(
    segments: list[Segment],
    rules: Rules | None = None,
    *,
    prefix: bool = False,
    duration: float | None = None,
) -> list[Cue]:
    """The cues of `segments` under `rules` (see the module contract); `prefix`: the first cue
    after each change of speaker begins with its label (SubRip's way); `duration`: the audio's
    length, which no cue is held past (the last one's shortest time gives way)."""
    rules = rules or Rules()
    channels = list(dict.fromkeys(s.channel for s in segments))
    if len(channels) < 2:
        return _cut(segments, rules, prefix=prefix, duration=duration)
    # Split by channel: each channel cut alone (two may speak at once), with room for a label.
    found: list[Cue] = []
    for ch in channels:
        mine = [s for s in segments if s.channel == ch]
        label = f"{mine[0].who}: " if prefix and mine[0].who else ""
        narrower = replace(rules, max_line_characters=rules.max_line_characters - len(label))
        for c in _cut(mine, narrower if label else rules, duration=duration):
            found.append(replace(c, lines=(label + c.lines[0], *c.lines[1:])) if label else c)
    return sorted(found, key=lambda c: c.start)


def _cut(
    segments: list[Segment], rules: Rules, *, prefix: bool = False, duration: float | None = None
) -> list[Cue]:
    """The cues of one stream of `segments` (one channel), in order, none overlapping."""
    words = tokens(segments)
    if prefix:
        words = labelled(words)
    n = len(words)
    if n == 0:
        return []
    width, most = rules.max_line_characters, rules.max_lines
    # cost[j]: the cheapest way to cut words[:j] into cues; back[j]: where its last cue starts.
    cost = [math.inf] * (n + 1)
    back = [0] * (n + 1)
    cost[0] = 0.0
    for i in range(n):
        if cost[i] == math.inf:
            continue
        used, line, length = 0, 0, -1  # greedy filling: the fewest lines words[i:j] need
        for j in range(i + 1, n + 1):
            size = columns(words[j - 1].text)
            gap = 1 if words[j - 1].space else 0
            length += size + gap
            if line and line + gap + size <= width:
                line += gap + size
            else:  # a new line; a word longer than a line fills one alone
                used, line = used + 1, max(size, width if size > width else 0) or size
            if j > i + 1 and (
                used > most
                or words[j - 1].end - words[i].start > rules.max_cue_seconds
                or words[j - 1].who != words[i].who  # a cue never mixes two speakers
                or words[j - 1].lang != words[i].lang  # nor two languages
            ):
                break
            total = cost[i] + COST_CUE + _break_cost(words, j - 1)
            short = length < width / 3
            if short and words[j - 1].end - words[i].start < rules.min_cue_seconds:
                total += COST_SHORT
            if total < cost[j]:
                cost[j], back[j] = total, i
    spans: list[tuple[int, int]] = []
    j = n
    while j > 0:
        spans.append((back[j], j))
        j = back[j]
    spans.reverse()
    raw = []
    for i, j in spans:
        text = [w.text for w in words[i:j]]
        spaces = [w.space for w in words[i:j]]
        layout = lines(text, width, most, spaces) or (text_of(words[i:j]),)
        raw.append((words[i].start, words[j - 1].end, layout, words[i].who, words[i].lang))
    return timed(raw, rules, segments[0].channel, duration)


def timed(
    raw: list[tuple[float, float, tuple[str, ...], str | None, str | None]],
    rules: Rules,
    channel: str | None = None,
    duration: float | None = None,
) -> list[Cue]:
    """Cue times that keep the gap, the longest and (where there is room) the shortest time."""
    out: list[Cue] = []
    floor = 0.0
    for k, (first, last, text, who, lang) in enumerate(raw):
        start = max(first, floor)
        end = min(max(last, start + 0.001), start + rules.max_cue_seconds)
        if k + 1 < len(raw):
            limit = raw[k + 1][0] - rules.min_gap_seconds
            if end < start + rules.min_cue_seconds:
                end = max(end, min(start + rules.min_cue_seconds, limit))
            if end > limit:
                end = max(limit, start + 0.001)
        else:
            end = max(end, start + rules.min_cue_seconds)
            if duration is not None:
                end = max(min(end, duration), start + 0.001)
        out.append(Cue(round(start, 3), round(end, 3), text, who, lang, channel))
        floor = end + rules.min_gap_seconds
    return out


def write(found: list[Cue], fmt: Literal["srt", "vtt"]) -> str:
    """`found` as a SubRip or WebVTT file, by pysubs2 (see the module contract)."""
    subs = pysubs2.SSAFile()
    for cue in found:
        text = cue.text.replace("\\", BACKSLASH)  # pysubs2 reads \N, \n and \h as its own
        if fmt == "vtt":  # cue text is HTML-like in WebVTT
            text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            if cue.lang:
                text = f"<lang {cue.lang}>{text}</lang>"
            if cue.who:
                text = f"<v {cue.who}>{text}"
        subs.append(
            pysubs2.SSAEvent(
                start=round(cue.start * 1000),
                end=round(cue.end * 1000),
                text=text.replace("\n", r"\N"),
            )
        )
    out: str = subs.to_string(fmt, apply_styles=False, keep_ssa_tags=True)
    return out.replace(BACKSLASH, "\\")
