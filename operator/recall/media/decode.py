"""Decoding lazily: decode and resample a source (opened by `recall.media.container`) frame by
frame, and seek back to a recorded sample for a resume (checked by the tail signature).

- A packet the codec refuses (`InvalidDataError`) is skipped with a warning, within a budget:
  `SKIP_IN_A_ROW` in a row, and `SKIP_ALLOWANCE` plus `SKIP_SHARE` of the packets read in that
  decoding; past it the file is `UndecodableMedia`. Its samples are left out: the audio after
  it moves earlier by their length (26 ms for an MP3 frame).
- A frame whose sample format, layout or rate differs from the one before (concatenated
  files) flushes the resampler and starts a new one; a channel split keeps the first frame's
  layout (later frames are rematrixed into it).
- Only `SEEK_EXACT` codecs are resumed by seeking (`recall.media.container` says why). A seek
  is also refused when it lands in a stretch of another format than the file's first frame,
  and when it skips a packet before the resume position.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

from recall.base import log
from recall.media.common import PREROLL_SECONDS, SAMPLE_RATE, TAIL_SECONDS, Either, Samples
from recall.media.container import av_reason, open_audio, seconds_text, seek_exact, tolerated
from recall.media.fetch import display_url
from recall.resources.errors import JobFailure

_log = log.get("engine")

# The skip budget of the module contract.
SKIP_IN_A_ROW = 10
SKIP_ALLOWANCE = 10
SKIP_SHARE = 0.01


class Decoder:
    """The first audio stream of a file as 16 kHz mono float32 blocks, from a given sample on:
    its channels mixed down, or only `channel` (from 0). After the first block (or the end),
    `tail` holds up to `TAIL_SECONDS` of the samples just before the start position; `position`
    counts the samples decoded up to the latest block; `skipped`, the undecodable packets."""

    def __init__(
        self,
        path: Path,
        url: str,
        *,
        max_samples: int | None = None,
        stop: Either | None = None,
        channel: int | None = None,
    ) -> None:
        self.path = path
        self.channel = channel
        self.shown = display_url(url)
        self.rate = SAMPLE_RATE
        self.max_samples = max_samples
        self.stop = stop or Either()
        self.position = 0
        self.skipped = 0
        self.tail: Samples = np.zeros(0, np.float32)
        self.tail_samples = round(TAIL_SECONDS * SAMPLE_RATE)
        self._layout: Any = None  # a channel split's output layout: the first frame's

    def from_start(self, start: int = 0) -> Iterator[Samples]:
        """Decode from the first sample; blocks begin at sample `start`."""
        container, stream = open_audio(self.path, self.shown)
        with container:
            yield from self._trimmed(self._resampled(self._frames(container, stream), 0), start)

    def seek(self, start: int, tail: str) -> Iterator[Samples] | None:
        """Blocks from sample `start`, reached by seeking; None when that cannot be done
        exactly (a codec outside `SEEK_EXACT`, no timestamps, a landing too late or in another
        format, a skipped packet, or samples whose signature is not `tail`)."""
        signed = start - self.tail_samples
        if not tail or signed < PREROLL_SECONDS * self.rate:
            return None
        container, stream = open_audio(self.path, self.shown)
        try:
            found = (
                self._seek(container, stream, signed, start, tail) if seek_exact(stream) else None
            )
        except (av.FFmpegError, ValueError, OverflowError, JobFailure):
            found = None  # decoding from the start says what is wrong, if anything is
        if found is None:
            container.close()
            self.position, self.skipped = 0, 0
            self.tail, self._layout = np.zeros(0, np.float32), None
            return None
        return self._after_seek(container, found)

    def _seek(
        self, container: Any, stream: Any, signed: int, start: int, tail: str
    ) -> tuple[Samples, Iterator[Samples]] | None:
        src = stream.codec_context.sample_rate or stream.rate
        base = stream.time_base
        if not src or base is None:
            return None
        frames = self._frames(container, stream)
        first = next(frames, None)
        if first is None or first.pts is None or first.sample_rate != src:
            return None
        origin = first.pts  # the first decoded sample is sample 0
        kind = _kind(first)
        self._layout = first.layout  # a channel split's output, as in an uninterrupted run
        target = Fraction(signed, self.rate) - Fraction(PREROLL_SECONDS).limit_denominator(1000)
        container.seek(int(target / base) + origin, stream=stream, backward=True)
        frames = self._frames(container, stream)
        # Resampling starts afresh at an input sample whose output sample is on the grid of
        # the uninterrupted run: the first input sample ≥ the landing that is a multiple of
        # in_unit, so both resamplers see the same phase.
        g = np.gcd(src, self.rate)
        in_unit, out_unit = src // g, self.rate // g
        for frame in frames:
            if frame.pts is None or _kind(frame) != kind:
                return None  # another format than the file's first: positions would differ
            offset = (frame.pts - origin) * base * src
            if offset.denominator != 1 or offset < 0:
                return None
            aligned = -(-int(offset) // in_unit) * in_unit
            drop = aligned - int(offset)
            if drop >= frame.samples:
                continue
            position = aligned // in_unit * out_unit
            if position > signed:
                return None  # landed after the signed samples
            self.position = position
            rest = itertools.chain((_dropped(frame, drop),), frames)
            checked = self._same_kind(rest, kind, start)
            blocks = self._resampled(checked, position)
            held: list[Samples] = []  # the latest blocks up to `start`, to check and hand on
            for block in blocks:
                held.append(block)
                while held and self.position - sum(map(len, held)) + len(held[0]) <= signed:
                    held.pop(0)  # entirely before the signed samples
                if self.position >= start:
                    break
            if self.position < start or self.skipped:
                return None
            joined = np.concatenate(held)
            before = joined[: len(joined) - (self.position - start)]
            if tail_signature(before[-self.tail_samples :]) != tail:
                return None
            self.tail = before[-self.tail_samples :].copy()
            return joined[len(before) :], blocks
        return None

    def _same_kind(
        self, frames: Iterator[Any], kind: tuple[str, str, int], start: int
    ) -> Iterator[Any]:
        """`frames`; one of another kind before sample `start` raises ValueError (ending the
        seek): positions counted from the landing would differ from the uninterrupted run's."""
        for frame in frames:
            if self.position < start and _kind(frame) != kind:
                raise ValueError("the audio format changes before the resume position")
            yield frame

    def _after_seek(
        self, container: Any, found: tuple[Samples, Iterator[Samples]]
    ) -> Iterator[Samples]:
        first, blocks = found
        with container:
            if len(first):
                yield first
            yield from blocks

    def _frames(self, container: Any, stream: Any) -> Iterator[Any]:
        """The stream's decoded frames, packet by packet; a packet the codec refuses is
        skipped (logged) within the budget of the module contract."""
        read = in_a_row = skipped = 0
        for packet in container.demux(stream):
            read += 1
            try:
                frames = packet.decode()
            except av.InvalidDataError as e:
                in_a_row += 1
                skipped += 1
                self.skipped += 1
                if in_a_row > SKIP_IN_A_ROW or skipped > SKIP_ALLOWANCE + SKIP_SHARE * read:
                    raise JobFailure(
                        "UndecodableMedia",
                        f"{self.shown}: cannot decode the audio ({skipped} of {read} packets "
                        f"undecodable; {av_reason(e)})",
                        permanent=True,
                    ) from None
                _log.warning(
                    "packet_skipped",
                    url=self.shown,
                    pts=packet.pts,
                    position=self.position,
                    reason=av_reason(e),
                )
                continue
            in_a_row = 0
            yield from frames

    def _resampled(self, frames: Iterator[Any], position: int) -> Iterator[Samples]:
        """Resampled blocks of `frames`; `self.position` counts from `position`."""
        self.position = position
        resampler: Any = None
        kind: tuple[str, str, int] | None = None
        try:
            for frame in frames:
                if self.stop.is_set():
                    return
                if _kind(frame) != kind:  # the first frame, or a change of format mid-stream
                    if resampler is not None:
                        yield from self._counted(resampler, None)
                    resampler, kind = self._resampler(frame), _kind(frame)
                yield from self._counted(resampler, frame)
            if resampler is not None:
                yield from self._counted(resampler, None)
        except (av.FFmpegError, ValueError) as e:
            raise JobFailure(
                "UndecodableMedia",
                f"{self.shown}: cannot decode the audio ({av_reason(e)})",
                permanent=True,
            ) from None

    def _resampler(self, frame: Any) -> Any:
        # Blocks of a second, whatever the codec's frames (1,024 samples of a WAV): the same
        # samples in 16 times fewer blocks, half the CPU of decoding (bench/enginecpu.py).
        size = self.rate
        if self.channel is None:
            return av.AudioResampler(format="flt", layout="mono", rate=self.rate, frame_size=size)
        # Every channel kept, packed (interleaved): PyAV gets the planes of a planar frame of
        # 8 channels or more wrong, and its `to_ndarray` crashes the process on one.
        if self._layout is None:
            self._layout = frame.layout
        channels = len(self._layout.channels)
        if self.channel >= channels:
            raise JobFailure(
                "UndecodableMedia",
                f"{self.shown}: no channel {self.channel} (the audio has {channels})",
                permanent=True,
            )
        return av.AudioResampler(format="flt", layout=self._layout, rate=self.rate, frame_size=size)

    def _samples(self, frame: av.AudioFrame) -> Samples:
        if self.channel is None:
            return np.asarray(frame.to_ndarray(), dtype=np.float32).reshape(-1)
        channels = len(frame.layout.channels)
        interleaved = frame.to_ndarray()[0]
        return np.ascontiguousarray(interleaved[self.channel :: channels], dtype=np.float32)

    def _counted(self, resampler: Any, frame: Any) -> Iterator[Samples]:
        for out in resampler.resample(frame):
            block = self._samples(out)
            self.position += len(block)
            limit = self.max_samples
            if limit is not None and self.position > (allowed := tolerated(limit)):
                raise JobFailure(
                    "SourceTooLarge",
                    f"{self.shown}: more than {seconds_text(allowed / self.rate)} s long, "
                    f"the limit is {seconds_text(limit / self.rate)} s",
                    permanent=True,
                )
            if len(block):
                yield block

    def _trimmed(self, blocks: Iterator[Samples], start: int) -> Iterator[Samples]:
        """`blocks` from sample `start` on; the samples before it feed `tail`."""
        recent: Samples = np.zeros(0, np.float32)
        for block in blocks:
            begin = self.position - len(block)
            if self.position <= start:
                recent = np.concatenate([recent, block])[-self.tail_samples :]
                continue
            if begin < start:
                recent = np.concatenate([recent, block[: start - begin]])[-self.tail_samples :]
                block = block[start - begin :]
            self.tail = recent
            yield block
        self.tail = recent


def _kind(frame: Any) -> tuple[str, str, int]:
    """What a resampler is set up for: the frame's sample format, layout and rate."""
    return frame.format.name, frame.layout.name, frame.sample_rate


def _dropped(frame: Any, drop: int) -> Any:
    """`frame` without its first `drop` samples, in its own format; a planar frame is cut
    packed (see `Decoder._resampler`), FFmpeg converting it there and back exactly."""
    if drop == 0:
        return frame
    rate, layout, name = frame.sample_rate, frame.layout, frame.format.name
    packed = frame.format.packed.name
    if frame.format.is_planar:
        frame = _converted(frame, packed)
    data = frame.to_ndarray()
    out = av.AudioFrame.from_ndarray(
        np.ascontiguousarray(data[:, drop * len(layout.channels) :]), format=packed, layout=layout
    )
    out.sample_rate = rate
    return out if packed == name else _converted(out, name)


def _converted(frame: Any, format: str) -> Any:
    """`frame` in another sample format (planar or packed), by FFmpeg."""
    out = av.AudioResampler(format=format, layout=frame.layout, rate=frame.sample_rate)
    frames = out.resample(frame)
    if len(frames) != 1 or frames[0].samples != frame.samples:
        raise ValueError("a frame did not convert to one frame of another sample format")
    return frames[0]


def tail_signature(samples: Samples) -> str:
    """A short signature of `samples` (CRC-32 of their float32 bytes): equal only when they are
    bit-identical, which is what a seek must reproduce."""
    data = np.ascontiguousarray(samples, dtype="<f4").tobytes()
    return f"{zlib.crc32(data):08x}"
