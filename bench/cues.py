"""Subtitle cues read back and checked against their rules: the oracle the tests and the
benchmarks hold `recall.transcripts.subtitles` to. `parse` reads a SubRip or WebVTT file back
into cues (by pysubs2); `check` re-states the module contract's rules (lines, characters, time
on screen, the gap, each channel on its own) and returns one line per broken rule and cue, []
when every rule holds, within `EPSILON` for times rounded to milliseconds; `proportional` says
whether some segment's cues were split in proportion (it has text but no word timings). The
runtime never calls them.
"""

from __future__ import annotations

from typing import Literal

import pysubs2

from recall.media.types import Segment
from recall.transcripts.subtitles import Cue, Rules
from recall.transcripts.words import timed_words

EPSILON = 0.0015  # tolerance of `check` for times rounded to milliseconds


def proportional(segments: list[Segment]) -> bool:
    """True when some segment with text has no word timings: its cues are split in proportion."""
    return any(not timed_words(s) and s.text.strip() for s in segments)


def check(found: list[Cue], rules: Rules | None = None) -> list[str]:
    """What breaks the rules in `found`, one line per broken rule and cue ([] when none)."""
    rules = rules or Rules()
    problems: list[str] = []
    for i, cue in enumerate(found, start=1):
        words = cue.text.split()
        if len(cue.lines) > rules.max_lines:
            problems.append(f"cue {i}: {len(cue.lines)} lines")
        for line in cue.lines:
            if len(line) > rules.max_line_characters and len(line.split()) > 1:
                problems.append(f"cue {i}: a line of {len(line)} characters")
        if cue.end <= cue.start:
            problems.append(f"cue {i}: ends at {cue.end:.3f} s, before it starts")
        if cue.end - cue.start > rules.max_cue_seconds + EPSILON:
            problems.append(f"cue {i}: {cue.end - cue.start:.2f} s on screen")
        before = [c for c in found[: i - 1] if c.channel == cue.channel]
        if before:  # the cues of two channels may overlap: each channel's may not
            gap = cue.start - before[-1].end
            if gap < rules.min_gap_seconds - EPSILON:
                problems.append(f"cue {i}: {gap:.3f} s after the previous cue")
        if not words:
            problems.append(f"cue {i}: empty")
    return problems


def parse(text: str, fmt: Literal["srt", "vtt"]) -> list[Cue]:
    """Cues read back from a SubRip or WebVTT file, by pysubs2."""
    subs = pysubs2.SSAFile.from_string(text, format_=fmt)
    return [
        Cue(e.start / 1000, e.end / 1000, tuple(e.text.replace(r"\N", "\n").split("\n")))
        for e in subs
    ]
