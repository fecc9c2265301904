"""Cutting samples into chunks as they stream, with the silence-snapping rule; and WAV encoding
for the HTTP engine and the redacted audio."""

from __future__ import annotations

import contextlib
import io
import wave
from collections.abc import Iterator
from typing import BinaryIO

import numpy as np
import numpy.typing as npt

from recall.media.common import (
    QUIET_SECONDS,
    QUIETER,
    SAMPLE_RATE,
    SNAP_SECONDS,
    STEP_SECONDS,
    TAIL_SECONDS,
    Samples,
)
from recall.media.decode import tail_signature
from recall.media.types import Chunk


class Cutter:
    """Cuts a stream of sample blocks into chunks (`recall.media.media`'s "Cuts"), holding at
    most one chunk and one block: `feed` blocks in order, then `finish` once the stream ended.
    A cut moves back to the quietest `QUIET_SECONDS` stretch (in steps of `STEP_SECONDS`) when
    it has less than `QUIETER` times the energy of the stretch just before the nominal cut; ties
    go to the later one, so chunks stay as long as possible. `start` and `index` place the
    first sample fed (a resume); `recent` holds the samples just before it, for `Chunk.tail`."""

    def __init__(
        self,
        rate: int,
        chunk_seconds: float,
        snap_seconds: float = SNAP_SECONDS,
        *,
        start: int = 0,
        index: int = 0,
    ) -> None:
        self.rate = rate
        self.size = max(1, round(chunk_seconds * rate))
        self.step = max(1, round(STEP_SECONDS * rate))
        self.width = max(1, round(QUIET_SECONDS / STEP_SECONDS))  # in steps
        self.steps_back = min(int(snap_seconds * rate), self.size // 2) // self.step
        self.tail_samples = round(TAIL_SECONDS * rate)
        self.position = start  # the sample where the buffered samples begin
        self.index = index
        self.recent: Samples = np.zeros(0, np.float32)
        self._blocks: list[Samples] = []
        self._buffered = 0

    def feed(self, block: Samples) -> Iterator[Chunk]:
        """The chunks that `block` completes (none until more than a chunk is buffered)."""
        if len(block):
            self._blocks.append(block)
            self._buffered += len(block)
        while self._buffered > self.size:
            buffer = self._joined()
            cut = self._cut(buffer)
            self._blocks = [buffer[cut:]]
            self._buffered -= cut
            yield self._chunk(buffer[:cut], last=False)

    def finish(self) -> Iterator[Chunk]:
        """The final chunk (the rest of the stream), if any samples are left."""
        if self._buffered:
            rest = self._joined()
            self._blocks, self._buffered = [], 0
            yield self._chunk(rest, last=True)

    def _joined(self) -> Samples:
        if len(self._blocks) == 1:
            return self._blocks[0]
        return np.concatenate(self._blocks)

    def _cut(self, buffer: Samples) -> int:
        """Where the next chunk ends, as an offset into `buffer` (which holds > size samples)."""
        cut = self.size
        if self.steps_back >= self.width:
            lo = cut - self.steps_back * self.step
            hops = buffer[lo:cut].astype(np.float64).reshape(self.steps_back, self.step)
            hop_energy = np.sum(hops * hops, axis=1)
            # energy of every stretch of `width` consecutive steps
            stretch = np.convolve(hop_energy, np.ones(self.width), mode="valid")
            quietest = len(stretch) - 1 - int(np.argmin(stretch[::-1]))
            if stretch[quietest] < QUIETER * stretch[-1]:
                cut = lo + quietest * self.step + (self.width * self.step) // 2
        return cut

    def _chunk(self, audio: Samples, *, last: bool) -> Chunk:
        first, end = self.position, self.position + len(audio)
        if len(audio) >= self.tail_samples:
            self.recent = audio[-self.tail_samples :]
        else:
            self.recent = np.concatenate([self.recent, audio])[-self.tail_samples :]
        chunk = Chunk(
            index=self.index,
            start=first / self.rate,
            duration=len(audio) / self.rate,
            audio=audio,
            first=first,
            end=end,
            tail=tail_signature(self.recent),
            last=last,
        )
        self.position, self.index = end, self.index + 1
        return chunk


def split(
    samples: Samples, rate: int, chunk_seconds: float, snap_seconds: float = SNAP_SECONDS
) -> list[Chunk]:
    """The chunks of an array held in memory (each holds a view of its samples)."""
    cutter = Cutter(rate, chunk_seconds, snap_seconds)
    return [*cutter.feed(samples), *cutter.finish()]


def pcm16(samples: Samples) -> npt.NDArray[np.int16]:
    """`samples` (float, -1..1) as 16-bit little-endian PCM, in a new array."""
    return (np.clip(samples, -1.0, 1.0) * 32767.0).round().astype("<i2")


@contextlib.contextmanager
def wav_writer(into: BinaryIO, rate: int = SAMPLE_RATE) -> Iterator[wave.Wave_write]:
    """A mono 16-bit PCM WAV written into `into`; its header is completed on exit (in place,
    when more frames were written than the first write announced: `into` must be seekable)."""
    with wave.open(into, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        yield w


def encode_wav(samples: Samples, rate: int = SAMPLE_RATE) -> bytes:
    """`samples` (float, -1..1) as a mono 16-bit PCM WAV file, in memory."""
    buffer = io.BytesIO()
    with wav_writer(buffer, rate) as w:
        w.writeframes(pcm16(samples).tobytes())
    return buffer.getvalue()
