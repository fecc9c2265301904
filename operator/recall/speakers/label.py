"""Speaker labels for a file's words: windows laid over the speech the words say is there,
each window's voice embedded as the audio streams past, the windows clustered into voices,
each word labelled with the voice of the window it shares most time with.

    labelling = label_voices(encoder, segments, blocks, bounds)
    labelling.segments        # every word and segment with speaker "S1", "S2", ...

Contract:
- Windows come from the word times alone, not the chunks: words are grouped into stretches of
  speech (gaps under `GAP`), each tiled with windows of `WINDOW` seconds (one centred on a
  shorter stretch). The same words and audio give the same labels, whatever the chunks,
  batches, slots or resumes.
- `blocks` is the file's audio in order, as (first sample, samples) pieces of any size: only the
  samples from the earliest window still to embed are kept, and at most `BATCH` windows wait
  for the encoder, so memory does not grow with the recording (the vectors do: 1 KB a window).
- Overlapping speech: a window where two voices sound is embedded as it is; its vector is
  nearest the louder voice, which labels it.
- A word's speaker is its window's voice; a segment's is the voice of most of its words' time;
  labels are "S1", "S2", ... in order of first appearance. A segment without words counts as
  one word, its own span.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from recall.media.types import Segment, Word
from recall.speakers.cluster import Bounds, Found, cluster
from recall.speakers.model import RATE, VoiceEncoder

GAP = 0.4  # seconds of silence that end a stretch of speech
WINDOW = 2.0  # seconds of audio a speaker vector is made from
BATCH = 16  # windows embedded at once (more costs memory, not time)

Floats = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Window:
    first: int  # sample
    end: int  # sample, exclusive

    @property
    def start(self) -> float:
        return self.first / RATE

    @property
    def stop(self) -> float:
        return self.end / RATE


def stretches(spans: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """`spans` (sorted by start) joined where the silence between them is under `GAP`."""
    out: list[tuple[float, float]] = []
    for start, end in spans:
        if out and start - out[-1][1] < GAP:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, max(start, end)))
    return out


def windows_of(spans: Sequence[tuple[float, float]]) -> list[Window]:
    """The windows over the speech `spans` cover (see the module contract), in order."""
    size = round(WINDOW * RATE)
    out: list[Window] = []
    for start, end in stretches(spans):
        length = end - start
        n = max(1, math.ceil(length / WINDOW - 0.05))  # a stretch a hair longer: one window
        for i in range(n):
            centre = start + (i + 0.5) * length / n
            first = max(0, round(centre * RATE) - size // 2)
            out.append(Window(first, first + size))
    return out


class Embedder:
    """Speaker vectors of `windows` from audio streamed past in order (see the contract)."""

    def __init__(self, encoder: VoiceEncoder, windows: Sequence[Window]) -> None:
        self.encoder = encoder
        self.windows = windows
        self.next = 0  # the first window not yet cut from the audio
        self.buffer = np.zeros(0, np.float32)
        self.buffer_first = 0  # the sample the buffer starts at
        self.pending: list[Floats] = []
        self.vectors: list[Floats] = []

    def add(self, first: int, samples: Floats) -> None:
        """The next piece of the file's audio, from sample `first` (contiguous or later)."""
        if first > self.buffer_first + len(self.buffer):  # a gap: what was before is gone
            self.buffer, self.buffer_first = np.zeros(0, np.float32), first
        self.buffer = np.concatenate([self.buffer, samples.astype(np.float32, copy=False)])
        self._cut(final=False)

    def finish(self) -> Floats:
        """Every window's vector (the last windows padded with silence past the audio's end)."""
        self._cut(final=True)
        self._embed()
        if not self.vectors:
            return np.zeros((0, 256), np.float32)
        return np.concatenate(self.vectors)

    def _cut(self, *, final: bool) -> None:
        end = self.buffer_first + len(self.buffer)
        while self.next < len(self.windows):
            w = self.windows[self.next]
            if w.end > end and not final:
                break
            lo, hi = w.first - self.buffer_first, w.end - self.buffer_first
            piece = self.buffer[max(0, lo) : max(0, hi)]
            if len(piece) < hi - max(0, lo) or lo < 0:  # past the end, or before the buffer
                piece = np.pad(piece, (max(0, -lo), (w.end - w.first) - len(piece) - max(0, -lo)))
            self.pending.append(piece)
            self.next += 1
            if len(self.pending) >= BATCH:
                self._embed()
        keep = self.windows[self.next].first if self.next < len(self.windows) else end
        drop = min(max(0, keep - self.buffer_first), len(self.buffer))
        self.buffer = self.buffer[drop:].copy()
        self.buffer_first += drop

    def _embed(self) -> None:
        if self.pending:
            self.vectors.append(self.encoder.embed(self.pending))
            self.pending = []


@dataclass(frozen=True)
class Labelling:
    segments: list[Segment]
    found: Found
    windows: int


def spans_of(segments: Sequence[Segment]) -> list[tuple[float, float]]:
    """Every word's times (a segment without words: its own), in order of start."""
    out: list[tuple[float, float]] = []
    for s in segments:
        if s.words:
            out.extend((w.start, w.end) for w in s.words)
        elif s.text.strip():
            out.append((s.start, s.end))
    return sorted(out)


def _best_window(start: float, end: float, windows: Sequence[Window], lo: int) -> int:
    """The window sharing most time with [start, end], searched from `lo` (windows sorted)."""
    best, best_overlap = -1, 0.0
    i = lo
    while i < len(windows) and windows[i].start < end:
        overlap = min(end, windows[i].stop) - max(start, windows[i].start)
        if overlap > best_overlap:
            best, best_overlap = i, overlap
        i += 1
    if best >= 0:
        return best
    mid = (start + end) / 2  # no window overlaps it: the nearest one
    candidates = [j for j in (lo - 1, lo, i - 1, i) if 0 <= j < len(windows)]
    return min(candidates, key=lambda j: abs((windows[j].start + windows[j].stop) / 2 - mid))


def label_voices(
    encoder: VoiceEncoder,
    segments: Sequence[Segment],
    blocks: Iterable[tuple[int, Floats]],
    bounds: Bounds,
) -> Labelling:
    """`segments` labelled with speakers by `encoder` (`VoiceEncoder.packaged()`: one per
    process) from the file's audio `blocks` (see the module contract)."""
    windows = windows_of(spans_of(segments))
    embedder = Embedder(encoder, windows)
    for first, samples in blocks:
        if embedder.next >= len(windows):
            break  # every window is cut: the rest of the audio is not needed
        embedder.add(first, samples)
    found = cluster(embedder.finish(), bounds)
    return Labelling(labelled(segments, windows, found.labels), found, len(windows))


def labelled(
    segments: Sequence[Segment], windows: Sequence[Window], labels: npt.NDArray[np.int64]
) -> list[Segment]:
    """`segments` with each word's and segment's speaker (see the module contract); labels
    renumbered by first appearance in time (of the words, and of the segments without words)."""
    if not windows:
        return list(segments)
    starts = [w.start for w in windows]
    order: dict[int, str] = {}
    out: list[Segment] = []

    def name(start: float, end: float) -> str:
        lo = max(0, int(np.searchsorted(starts, start - WINDOW, side="left")))
        label = int(labels[_best_window(start, end, windows, lo)])
        return order.setdefault(label, f"S{len(order) + 1}")

    # Every word, and every segment of text without words (k = -1), named in time order.
    spoken = sorted(
        [
            (w.start, w.end, i, k)
            for i, s in enumerate(segments)
            for k, w in enumerate(s.words or [])
        ]
        + [
            (s.start, s.end, i, -1)
            for i, s in enumerate(segments)
            if not s.words and s.text.strip()
        ]
    )
    names: dict[tuple[int, int], str] = {(i, k): name(a, b) for a, b, i, k in spoken}
    for i, s in enumerate(segments):
        if s.words:
            words = [w.model_copy(update={"speaker": names[(i, k)]})
                     for k, w in enumerate(s.words)]  # fmt: skip
            out.append(s.model_copy(update={"words": words, "speaker": _most(words)}))
        elif s.text.strip():
            out.append(s.model_copy(update={"speaker": names[(i, -1)]}))
        else:
            out.append(s)
    return out


def _most(words: Sequence[Word]) -> str | None:
    time: dict[str, float] = {}
    for w in words:
        if w.speaker:
            time[w.speaker] = time.get(w.speaker, 0.0) + max(w.end - w.start, 1e-3)
    return max(time, key=lambda k: time[k]) if time else None
