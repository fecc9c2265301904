"""Windows: where a call's speech is, and the 30-second windows the model decodes it in.

Contract:
- `speech_of(audio)` finds a chunk's stretches of speech (sample ranges, in order) as
  faster-whisper's batched pipeline's own VAD does: Silero VAD (`vad`), split at 160 ms
  silences, at most a window each, padded by `PAD_MS` (two closer than twice that meet
  halfway); `plan` detects a call's chunks side by side. `stretches_of_each` gives each chunk's
  stretches both padded and not (`Stretches.said`): the same stretches, one VAD pass, the
  unpadded ones where the voice is, so the pauses between them are the silences' own lengths.
- `windows_of(speech)` joins them into windows while they fit `WINDOW_SECONDS`: a chunk of
  30 s or less with speech is one window, from its first sound to its last, and a silent chunk
  none (no model time, and no invented "You": tiny.en hears one in 30 s of silence). Without
  the VAD a chunk is cut in 30 s slices.
- `plan(chunks, vad_filter)` lays a call's windows end to end (`Window.at`): a window never
  crosses a chunk's edge, each starts on a 10 ms frame of the joined audio, and `Window.shift`
  moves a time in the joined audio back into its chunk exactly.
- `unreached(speech, words)` measures the speech a decoding wrote no word near: a prompted
  window that leaves `LOST_SECONDS` of it farther than `REACH` from every word lost words.
- Pure but for the VAD's model; nothing here decodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from recall.media.types import Chunk

RATE = 16_000
HOP = RATE // 100  # samples per 10 ms frame
WINDOW_SECONDS = 30  # Whisper's input: one batched window
PAD_MS = 400  # the pipeline's VAD pads each stretch of speech by this (VadOptions' default)
LOST_SECONDS, REACH = 2.0, 0.5  # see `unreached` in the contract

Span = tuple[int, int]  # a sample range [first, end)


@dataclass(frozen=True)
class Window:
    """One window of a batch: its chunk (index in the batch), its samples in the chunk, and
    where those samples start in the batch's audio put end to end."""

    chunk: int
    first: int
    end: int
    at: int

    @property
    def shift(self) -> float:
        """Seconds to add to a time in the batch's audio to make it the chunk's."""
        return (self.first - self.at) / RATE


@dataclass(frozen=True)
class Stretches:
    """A chunk's stretches of speech: `padded` as the pipeline's VAD gives them, `said` the
    same ones unpadded (see the module contract)."""

    padded: list[Span]
    said: list[Span]


def speech_of(audio: Any) -> list[Span]:
    """The stretches of speech in `audio` (sample ranges, in order; see the contract)."""
    return speech_of_each([audio])[0]


def speech_of_each(audios: list[Any]) -> list[list[Span]]:
    """`speech_of` each of `audios` (a call's chunks), detected side by side."""
    return [s.padded for s in stretches_of_each(audios)]


def stretches_of_each(audios: list[Any]) -> list[Stretches]:
    """Each of `audios`' stretches of speech, padded and not, detected side by side."""
    from faster_whisper.vad import VadOptions

    from recall.engines.whisper.vad import padded, speech_timestamps_of

    some = [a for a in audios if a is not None and len(a)]
    # Found unpadded, then padded as the VAD pads: a stretch's longest is the window less
    # both pads, as the VAD counts it with the pad in its options.
    options = VadOptions(
        max_speech_duration_s=WINDOW_SECONDS - 2 * PAD_MS / 1000,
        min_silence_duration_ms=160,
        speech_pad_ms=0,
    )
    found = iter(speech_timestamps_of(some, options) if some else [])
    out: list[Stretches] = []
    for a in audios:
        if a is None or not len(a):
            out.append(Stretches([], []))
            continue
        said = next(found)
        wide = padded([dict(s) for s in said], RATE * PAD_MS / 1000, len(a))
        out.append(Stretches(spans_of(wide, len(a)), spans_of(said, len(a))))
    return out


def spans_of(stretches: list[dict[str, int]], length: int) -> list[Span]:
    """The VAD's stretches as sample ranges within `length`."""
    return [(int(s["start"]), min(int(s["end"]), length)) for s in stretches]


def windows_of(speech: list[Span]) -> list[Span]:
    """`speech` (sample ranges, in order) joined into windows while they fit `WINDOW_SECONDS`."""
    size = WINDOW_SECONDS * RATE
    out: list[Span] = []
    for first, end in speech:
        if out and end - out[-1][0] <= size:
            out[-1] = (out[-1][0], end)
        else:
            out.append((first, min(end, first + size)))
    return out


def speech_windows(audio: Any, vad_filter: bool = True) -> list[Span]:
    """The windows (sample ranges) a call decodes in `audio` (see the module contract)."""
    size = WINDOW_SECONDS * RATE
    if audio is None or len(audio) == 0:
        return []
    if not vad_filter:
        return [(a, min(a + size, len(audio))) for a in range(0, len(audio), size)]
    return windows_of(speech_of(audio))


def plan(
    chunks: list[Chunk],
    vad_filter: bool,
    group: Callable[[Stretches], list[Span]] | None = None,
) -> tuple[list[list[Span]], list[Window]]:
    """Each chunk's stretches of speech (padded; none without the VAD) and the call's windows,
    laid end to end in the order of the chunks; `group` makes a chunk's windows of its speech
    (`windows_of` its padded stretches by default; segment scope decides a language per span
    of it)."""
    group = group or (lambda s: windows_of(s.padded))
    windows: list[Window] = []
    at = 0
    found = stretches_of_each([c.audio for c in chunks]) if vad_filter else []
    speech = [s.padded for s in found] if vad_filter else [[] for _ in chunks]
    for k, chunk in enumerate(chunks):
        spans = group(found[k]) if vad_filter else speech_windows(chunk.audio, False)
        for first, end in spans:
            windows.append(Window(k, first, end, at))
            # The next window starts on a 10 ms frame: the pipeline times words from the
            # frame its window starts in, so they are exact only there.
            at = -(-(at + end - first) // HOP) * HOP
    return speech, windows


def inside(speech: list[Span], window: Window) -> list[tuple[float, float]]:
    """The part of a chunk's `speech` inside `window`, in seconds of the chunk."""
    return [
        (max(a, window.first) / RATE, min(b, window.end) / RATE)
        for a, b in speech
        if b > window.first and a < window.end
    ]


def unreached(
    speech: list[tuple[float, float]], words: list[tuple[float, float]], reach: float = REACH
) -> float:
    """Seconds of `speech` (stretches, in order) farther than `reach` from every one of `words`
    (spans, in any order): speech the decoding wrote nothing for. Pure."""
    near = sorted((start - reach, end + reach) for start, end in words)
    total = 0.0
    for first, end in speech:
        at = first  # the speech before `at` is reached
        for a, b in near:
            if b <= at or a >= end:
                continue
            total += max(0.0, a - at)
            at = max(at, b)
            if at >= end:
                break
        total += max(0.0, end - at)
    return float(total)
