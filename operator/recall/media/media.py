"""Audio preparation for the real engines: fetch a source, then decode and cut it lazily.

Contract:
- `load_media(url, options)` fetches and probes the source (an audio stream, an estimated
  duration) without decoding it. The `AudioMedia` it returns decodes, resamples to 16 kHz mono
  float32 and cuts as `chunks()` is iterated: memory is bounded by one chunk plus one decoded
  frame, whatever the duration.
- Cuts: each chunk is at most `chunk_seconds` long; a cut moves back, by at most
  `snap_seconds`, into a clearly quieter 100 ms stretch when there is one, so fewer words are
  split; uniformly loud audio is cut at exactly `chunk_seconds`. A cut looks only at the
  `snap_seconds` before the nominal cut, so a stream is cut as the whole decoded array would
  be, and a resume at a recorded cut yields the same cuts as an uninterrupted run.
- Resume (`chunks(resume)`): a seek a little before the position, the resampler re-aligned on
  the sample grid, the samples before the position checked against the checkpoint's
  `tail_signature` (measured bit-exact for WAV, FLAC, MP3, Opus and Vorbis within 0.5 s of the
  seek point); where a seek is refused (`recall.media.decode` says when), a decode from the
  start. Either way the first chunk starts at exactly the recorded sample: no gap, no overlap.
  A source that ends before the position raises `ResumeInvalid` before any chunk is yielded.
- Sources: `file:///path` is read in place, fingerprinted by size and mtime; `http(s)://` is
  streamed to a temporary file (removed by `close()`, or at once when opening fails), with
  `http_timeout` on connect and every read and at most `max_bytes` (by Content-Length and by
  counting), fingerprinted by the SHA-256 of its bytes (ETags differ between replicas or are
  missing).
- Every failure is a `JobFailure` with a one-line message naming the URL, credentials hidden
  (`fetch.display_url`). Permanent: SourceNotFound (missing file, HTTP 404/410), SourceRejected
  (other 4xx, an unsupported or malformed URL), SourceTooLarge (bytes, or over `max_seconds`
  beyond `container.LIMIT_TOLERANCE`, estimated or decoded), UndecodableMedia (not media, no
  audio stream, no samples, past `recall.media.decode`'s skip budget). Retriable:
  SourceUnavailable (timeouts, connection errors, HTTP 5xx, 408 and 429, I/O errors).
- Channels (`spec.transcript.channels: split`): each channel is decoded on its own (not mixed
  down) and cut after the one before, its chunks labelled `ch0`, `ch1`, ...; channel c's sample
  positions count from c × `CHANNEL_STRIDE`, so a resume point names its channel; `start` is the
  time in the file. `duration` is the file's; `channels` counts the channels transcribed
  (metering counts `duration × channels`). A mono file is one channel (`mono` says so: the
  result records one channel). The cutting's source names the channel count, so a mixed run's
  checkpoint never resumes a split one.

Pure parts (`Cutter`, `split`, `tail_signature`, `classify_http_status`, `display_url`,
`encode_wav`) do no I/O.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from recall.base import log
from recall.base.clock import SYSTEM, Clock
from recall.media.common import SAMPLE_RATE, SNAP_SECONDS, Either, ResumeInvalid, Samples
from recall.media.container import channels_of, over_limit, probe, seconds_text
from recall.media.cut import Cutter, pcm16, wav_writer
from recall.media.decode import Decoder, tail_signature
from recall.media.fetch import Fetched, ObjectReader, display_url, fetch
from recall.media.types import Chunk, Cutting, Media, Resume
from recall.resources.errors import JobFailure

if TYPE_CHECKING:
    from recall.base.settings import WorkerSettings
    from recall.resources import TranscriptionJob


_log = log.get("engine")
CHANNEL_STRIDE = 1 << 40  # samples: channel c of a split file counts from c × this (~2 years)


@dataclass(frozen=True)
class MediaOptions:
    """How sources are fetched and cut; `from_settings` maps the worker's settings."""

    chunk_seconds: float = 30.0
    snap_seconds: float = SNAP_SECONDS
    max_bytes: int = 2 * 1024**3
    http_timeout: float = 30.0
    max_seconds: float | None = None
    workdir: Path | None = None  # where downloads go; None = the system temp directory
    objects: ObjectReader | None = None  # reads s3://, gs://, az:// sources (the worker's)
    split: bool = False  # each channel on its own (`spec.transcript.channels: split`)
    clock: Clock = SYSTEM  # what the logged fetch and resume times are read from

    @classmethod
    def from_settings(
        cls, settings: WorkerSettings, objects: ObjectReader | None = None
    ) -> MediaOptions:
        return cls(
            chunk_seconds=float(settings.chunk_seconds),
            max_bytes=settings.media_max_bytes,
            http_timeout=settings.http_timeout,
            max_seconds=settings.media_max_seconds,
            objects=objects,
        )


def load_job_media(job: TranscriptionJob, options: MediaOptions) -> AudioMedia:
    """`load_media` for a job, with its `spec.engine.chunkSeconds`, when it sets one, and its
    `spec.transcript.channels`."""
    engine, transcript = job.spec.engine, job.spec.transcript
    if engine is not None and engine.chunk_seconds:
        options = dataclasses.replace(options, chunk_seconds=float(engine.chunk_seconds))
    if transcript is not None and transcript.split:
        options = dataclasses.replace(options, split=True)
    return load_media(job.spec.source.url, options)


def load_media(url: str, options: MediaOptions) -> AudioMedia:
    """Fetch and probe the source at `url`; see the module contract."""
    began = options.clock.monotonic()
    source = fetch(
        url,
        max_bytes=options.max_bytes,
        http_timeout=options.http_timeout,
        workdir=options.workdir,
        objects=options.objects,
    )
    try:
        seconds = probe(source.path, url)
        if seconds is not None and over_limit(seconds, options.max_seconds):
            raise JobFailure(
                "SourceTooLarge",
                f"{display_url(url)}: {seconds_text(seconds)} s long, the limit is "
                f"{seconds_text(options.max_seconds or 0)} s",
                permanent=True,
            )
        channels = channels_of(source.path, url) if options.split else 1
        media = AudioMedia(source, options, seconds, channels)
    except BaseException:
        source.remove()
        raise
    _log.info(
        "media_opened",
        url=display_url(url),
        bytes=source.size,
        estimated_seconds=None if seconds is None else round(seconds, 3),
        elapsed=round(options.clock.monotonic() - began, 3),
    )
    return media


class AudioMedia(Media):
    """A fetched source, decoded and cut only while `chunks()` is iterated."""

    def __init__(
        self, source: Fetched, options: MediaOptions, seconds: float | None, channels: int = 1
    ) -> None:
        self.source = source
        self.options = options
        self.channels = channels if options.split else 1  # transcribed on their own
        self.mono = options.split and channels == 1  # split asked of a mono file
        fingerprint = source.fingerprint
        if self.channels > 1:
            fingerprint = f"{fingerprint}#channels={self.channels}"
        self.cutting = Cutting(
            chunk_seconds=options.chunk_seconds,
            snap_seconds=options.snap_seconds,
            rate=SAMPLE_RATE,
            source=fingerprint,
        )
        self.estimated_samples = None if seconds is None else round(seconds * SAMPLE_RATE)
        self.resumed_by: str | None = None  # "seek" or "decode" after a resumed iteration began
        self._closed = threading.Event()

    def close(self) -> None:
        self._closed.set()
        self.source.remove()

    def chunks_total(self, done: int, position: int, *, finished: bool = False) -> int:
        if self.channels == 1 or finished:
            return super().chunks_total(done, position, finished=finished)
        channel, local = divmod(position, CHANNEL_STRIDE)
        rest = (self.channels - channel) * (self.estimated_samples or 0) - local
        return done + max(1, math.ceil(rest / self.cutting.chunk_samples))

    def chunks(
        self, resume: Resume | None = None, cancel: threading.Event | None = None
    ) -> Iterator[Chunk]:
        if self.channels == 1:
            yield from self._chunks(resume, cancel)
            return
        first, local = divmod(resume.position, CHANNEL_STRIDE) if resume else (0, 0)
        index = resume.chunks if resume else 0
        for channel in range(first, self.channels):
            at = Resume(index, local, resume.tail if resume and local else "")
            offset = channel * CHANNEL_STRIDE
            last = channel == self.channels - 1
            for chunk in self._chunks(at if index or local else None, cancel, channel):
                index = chunk.index + 1
                yield dataclasses.replace(
                    chunk,
                    first=chunk.first + offset,
                    end=chunk.end + offset,
                    last=chunk.last and last,
                    channel=f"ch{channel}",
                )
            local = 0

    def _chunks(
        self,
        resume: Resume | None = None,
        cancel: threading.Event | None = None,
        channel: int | None = None,
    ) -> Iterator[Chunk]:
        stop = Either(self._closed, cancel)
        max_samples = (
            None
            if self.options.max_seconds is None
            else int(self.options.max_seconds * SAMPLE_RATE)
        )
        decoder = Decoder(
            self.source.path, self.source.url, max_samples=max_samples, stop=stop, channel=channel
        )
        start = resume.position if resume else 0
        began = self.options.clock.monotonic()
        blocks: Iterator[Samples] | None = None
        if resume is not None and start > 0:
            blocks = decoder.seek(start, resume.tail)
            self.resumed_by = "seek" if blocks is not None else "decode"
        if blocks is None:
            blocks = decoder.from_start(start)
        cutter = Cutter(
            SAMPLE_RATE,
            self.cutting.chunk_seconds,
            self.cutting.snap_seconds,
            start=start,
            index=resume.chunks if resume else 0,
        )
        primed = False
        for block in blocks:
            if not primed:  # the decoder now stands at `start`: its tail is known
                primed = True
                self._check_tail(decoder, resume, began)
                cutter.recent = decoder.tail
            yield from self._signed(cutter.feed(block), decoder)
        if stop.is_set():
            return
        if decoder.position == 0:
            raise JobFailure(
                "UndecodableMedia", f"{decoder.shown}: no audio samples", permanent=True
            )
        if decoder.position < start:
            raise ResumeInvalid(
                f"{decoder.shown}: the source ends at sample {decoder.position}, before the "
                f"checkpoint's position {start}"
            )
        if not primed:
            self._check_tail(decoder, resume, began)
        self.decoded_samples = decoder.position
        yield from self._signed(cutter.finish(), decoder)

    @staticmethod
    def _signed(chunks: Iterator[Chunk], decoder: Decoder) -> Iterator[Chunk]:
        """`chunks`, without a tail signature once the decoder has skipped a packet: a seek
        would not count the skipped samples, so a resume after one decodes from the start."""
        for chunk in chunks:
            yield dataclasses.replace(chunk, tail="") if decoder.skipped else chunk

    def silenced(self, spans: list[tuple[float, float]], into: BinaryIO) -> None:
        """Write the whole audio (mixed down, 16 kHz mono) into `into` (seekable) as a WAV with
        every span of `spans` (seconds) silenced: a decoded block at a time, so memory stays
        bounded whatever the duration (the WAV is about 115 MB an hour)."""
        silent = _joined([(int(s * SAMPLE_RATE), math.ceil(e * SAMPLE_RATE)) for s, e in spans])
        decoder = Decoder(self.source.path, self.source.url, stop=Either(self._closed))
        at = span = 0
        with wav_writer(into) as wav:
            for block in decoder.from_start():
                pcm, end = pcm16(block), at + len(block)
                while span < len(silent) and silent[span][1] <= at:
                    span += 1
                for first, last in silent[span : bisect.bisect_left(silent, (end,))]:
                    pcm[max(first, at) - at : min(last, end) - at] = 0
                wav.writeframes(pcm.tobytes())
                at = end

    def _check_tail(self, decoder: Decoder, resume: Resume | None, began: float) -> None:
        if resume is None or resume.position == 0:
            return
        signature = tail_signature(decoder.tail)
        _log.info(
            "media_resumed",
            url=display_url(self.source.url),
            by=self.resumed_by,
            position=resume.position,
            seconds=round(self.options.clock.monotonic() - began, 3),
        )
        if resume.tail and signature != resume.tail:
            # Positions are what prevent gaps and overlaps; a different decoder build may
            # produce slightly different samples, which changes nothing that was transcribed.
            _log.warning(
                "resume_samples_differ",
                url=display_url(self.source.url),
                position=resume.position,
                recorded=resume.tail,
                decoded=signature,
            )


def _joined(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sample spans `[first, end)` sorted, the empty ones dropped and the overlapping joined, so
    both ends only grow from one to the next."""
    out: list[tuple[int, int]] = []
    for first, end in sorted((max(0, f), e) for f, e in spans if e > max(0, f)):
        if out and first <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((first, end))
    return out
