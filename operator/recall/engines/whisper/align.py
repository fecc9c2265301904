"""Word alignment: faster-whisper's words and segments as recall's, timed to the sound.

Contract:
- Word times: faster-whisper's alignment (cross-attention), then each word's start moved to its
  first sound and its end to its last within its own span (`snap_to_sound` over the chunk's
  `islands`): the alignment alone starts a word where the silence before it starts, or late in
  a word after a pause. Words stay inside their segment, in order, none starting before the
  previous one ends (`words_of`).
- A segment's times are moved by the window's shift into its chunk and clamped to [0, chunk
  duration]; its confidence is `exp(avg_logprob)`, the geometric mean of its tokens'
  probabilities. A segment given no word has `words` None, never an empty list (its subtitles
  and aws.json items are split in proportion).
- `window_segments` cuts a batched window's one segment (up to 30 s) at its words: after a
  sentence's end (`ends_sentence`), at a pause of `PAUSE_SECONDS`, or before a segment would
  pass `SEGMENT_SECONDS`; each segment spans its words, kept only when the job asks for them.
- Pure: no model call.
"""

from __future__ import annotations

import bisect
import math
from typing import Any

from recall.media.types import Segment, Word

BRIDGE_FRAMES = 8  # silences up to 80 ms inside a stretch of sound are part of it
SEGMENT_SECONDS = 10.0  # a batched window's words are cut into segments at most this long
PAUSE_SECONDS = 1.0  # ... and at silences this long between two words
# Full stops that end no sentence: a window's words are not cut after them.
ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "prof", "st", "sr", "jr", "mt", "vs", "capt"})

Sounds = list[tuple[float, float]]  # stretches of sound, seconds of the chunk, in order


def words_of(raw: Any, start: float, end: float, shift: float = 0.0) -> list[Word]:
    """faster-whisper's words of a segment, inside [start, end], in order, not overlapping;
    then `shift` seconds later."""
    out: list[Word] = []
    floor = start
    for w in raw or []:
        text = str(w.word)
        if not text.strip():
            continue
        w_start = min(max(float(w.start), floor), end)
        w_end = min(max(float(w.end), w_start), end)
        out.append(
            Word(
                start=w_start + shift,
                end=w_end + shift,
                text=text,
                probability=float(w.probability),
            )
        )
        floor = w_end
    return out


def islands(audio: Any, rate: int = 16_000) -> Sounds:
    """The stretches of sound in `audio` (seconds): 10 ms frames louder than a tenth of its
    speech level, joined across silences shorter than `BRIDGE_FRAMES` (a stop consonant)."""
    import numpy as np

    frame = rate // 100
    count = len(audio) // frame
    if count == 0:
        return []
    rms = np.sqrt(np.mean(np.square(audio[: count * frame].reshape(count, frame)), axis=1))
    loud = np.flatnonzero(rms >= max(1e-3, 0.1 * float(np.percentile(rms, 95))))
    runs = np.split(loud, np.flatnonzero(np.diff(loud) > BRIDGE_FRAMES) + 1)
    return [(int(run[0]) / 100, (int(run[-1]) + 1) / 100) for run in runs if len(run)]


def _stretch_of(w: Word, sounds: Sounds, ends: list[float]) -> int:
    """The first stretch of sound `w` overlaps at least half as much as the one it overlaps
    most; -1 when it overlaps none. `ends`: the stretches' ends, in order."""
    shares = []
    first = bisect.bisect_right(ends, w.start)  # the stretches before it end where it starts
    for k, (a, b) in enumerate(sounds[first:], first):
        if a >= w.end:
            break
        shared = min(b, w.end) - max(a, w.start)
        if shared > 0:
            shares.append((k, shared))
    most = max((shared for _, shared in shares), default=0.0)
    return next((k for k, shared in shares if shared >= most / 2), -1)


def snap_to_sound(words: list[Word], sounds: Sounds, floor: float = 0.0) -> list[Word]:
    """`words` with their times moved to the sound they were said in (`islands`): each word
    belongs to its stretch (`_stretch_of`: a long span over several words' sounds means the
    first); it ends where that stretch ends at the latest, and the first word of a stretch
    starts where the stretch starts, never before the previous word's end (or `floor`)."""
    out: list[Word] = []
    previous = -1  # the stretch of the word before
    ends = [b for _, b in sounds]
    for w in words:
        best = _stretch_of(w, sounds, ends)
        low = out[-1].end if out else floor
        if best < 0:
            out.append(w.model_copy(update={"start": max(w.start, low)}))
            continue
        a, b = sounds[best]
        start = a if best != previous else max(w.start, a)
        start = max(start, low)
        end = min(w.end, b)
        if end <= start:
            start, end = max(w.start, low), max(w.end, w.start, low)
        out.append(w.model_copy(update={"start": start, "end": end}))
        previous = best
    return out


def confidence(avg_logprob: float) -> float:
    """The geometric mean of a window's token probabilities, 0-1."""
    return round(min(1.0, math.exp(float(avg_logprob))), 4)


def ends_sentence(text: str) -> bool:
    """Whether a word as the model wrote it ends a sentence: ? ! … or a full stop that is not
    an abbreviation's ("Mr.") or an initial's ("J.")."""
    word = text.strip().rstrip("\"')”’")
    if word.endswith(("?", "!", "…")):
        return True
    if not word.endswith("."):
        return False
    stem = word[:-1].lstrip("\"'(“‘")
    return len(stem) > 1 and "." not in stem and stem.lower() not in ABBREVIATIONS


def split_words(words: list[Word]) -> list[list[Word]]:
    """A window's words in segments, broken as the contract says; every word in order."""
    out: list[list[Word]] = []
    for w in words:
        group = out[-1] if out else None
        if (
            group is None
            or ends_sentence(group[-1].text)
            or w.start - group[-1].end >= PAUSE_SECONDS
            or w.end - group[0].start > SEGMENT_SECONDS
        ):
            out.append([w])
        else:
            group.append(w)
    return out


def segment_of(
    raw: Any,
    duration: float,
    sounds: Sounds | None,
    *,
    shift: float = 0.0,
    floor: float = 0.0,
) -> Segment:
    """faster-whisper's segment `raw` as recall's: `shift` seconds later, inside [0, duration],
    its words (when `sounds` is given: the chunk's stretches of sound) snapped to the sound."""
    start = min(max(float(raw.start) + shift, 0.0), duration)
    end = min(max(float(raw.end) + shift, start), duration)
    said = None
    if sounds is not None:
        timed = words_of(raw.words, start - shift, end - shift, shift)
        said = snap_to_sound(timed, sounds, floor=floor)
        if said:  # the segment spans its words, which snapping may have moved past its edges
            start = min(start, said[0].start)
            end = min(max(end, said[-1].end), duration)
    return Segment(
        start=start,
        end=end,
        text=raw.text.strip(),
        confidence=confidence(raw.avg_logprob),
        words=said or None,  # no word aligned: no word timings, not an empty list
    )


def window_segments(
    raw: Any,
    duration: float,
    sounds: Sounds,
    *,
    shift: float,
    floor: float,
    keep_words: bool,
) -> list[Segment]:
    """A batched window's one segment (`raw`, with its words) cut at its words into segments
    (`split_words`), times moved by `shift` into the chunk; words kept when `keep_words`."""
    whole = segment_of(raw, duration, sounds, shift=shift, floor=floor)
    if not whole.text:
        return []
    if not whole.words:  # text the alignment gave no word to: the window, whole, without words
        return [whole]
    out = []
    for group in split_words(whole.words):
        text = "".join(w.text for w in group).strip()
        if text:
            out.append(
                Segment(
                    start=group[0].start,
                    end=group[-1].end,
                    text=text,
                    confidence=whole.confidence,
                    words=group if keep_words else None,
                )
            )
    return out
