"""Audio preparation for the real engines: fetch a source, then decode and cut it lazily.

Contract:
- `load_media(url, options)` fetches the source and probes it (an audio stream, an estimated
  duration) without decoding it, and returns an `AudioMedia` (see `recall.engines.base.Media`).
  Its `chunks()` decodes, resamples to 16 kHz mono float32 and cuts as it goes: memory is
  bounded by one chunk plus one decoded frame, whatever the duration.
- Cuts: each chunk is at most `chunk_seconds` long; a cut moves back, by at most
  `snap_seconds`, into a clearly quieter 100 ms stretch when there is one, so a word is less
  often split between two chunks. Uniformly loud audio is cut at exactly `chunk_seconds`. The
  decision looks only at the `snap_seconds` before the nominal cut, so a stream is cut exactly
  as the whole decoded array would be, and a cut depends only on the samples after the
  previous cut: a resume at a recorded cut yields the same cuts as an uninterrupted run.
- Resume (`chunks(resume)`): the decoder seeks to a little before the resume position, re-aligns
  the resampler on the sample grid, and checks the samples just before the position against
  the signature recorded with the checkpoint (`tail_signature`). On a match (measured:
  bit-exact for WAV, FLAC, MP3 and Opus less than 0.5 s after the seek point), it continues
  from there: a resume at hour 9 of a 10-hour Opus file costs a fraction of a second instead of
  ~80 s of decoding. Otherwise it decodes from the start and skips to the position. Either way
  the first chunk starts at exactly the recorded sample: no gap, no overlap. A source that ends
  before the position raises `ResumeInvalid` before any chunk is yielded.
- Sources: `file:///path` is read in place and fingerprinted by size and mtime; `http(s)://` is
  streamed to a temporary file (removed by `AudioMedia.close()`, or at once when opening
  fails) with `http_timeout` on connect and on every read, at most `max_bytes` accepted (by
  Content-Length and by counting), and fingerprinted by the SHA-256 of its bytes (computed
  while downloading: validators such as ETag differ between replicas or are missing).
- Every failure is an `EngineError` with a one-line message naming the URL (user info and
  query string hidden: they often hold credentials). Permanent: SourceNotFound (missing file,
  HTTP 404/410), SourceRejected (other 4xx, unsupported URL), SourceTooLarge (bytes, or longer
  than `max_seconds` by the container's estimate or while decoding), UndecodableMedia (not
  media, no audio stream, no samples). Retriable: SourceUnavailable (timeouts, connection
  errors, HTTP 5xx, 408 and 429, I/O errors).

Pure parts (`Cutter`, `split`, `tail_signature`, `classify_http_status`, `display_url`,
`encode_wav`) take no I/O and are unit-tested directly.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import re
import tempfile
import threading
import time
import wave
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit, urlunsplit

import av
import httpx
import numpy as np
import numpy.typing as npt

from recall import log
from recall.engines.base import Chunk, Cutting, EngineError, Media, Resume

if TYPE_CHECKING:
    from recall.models import TranscriptionJob
    from recall.settings import WorkerSettings

SAMPLE_RATE = 16_000
SNAP_SECONDS = 2.0  # how far back from a nominal cut to look for a pause
QUIET_SECONDS = 0.1  # a pause is the quietest stretch this long (a gap between words)...
STEP_SECONDS = 0.01  # ...looked for in steps of this
QUIETER = 0.5  # and used when below this share of the energy just before the nominal cut
TAIL_SECONDS = 0.25  # the samples before a cut that its signature covers
PREROLL_SECONDS = 5.0  # a resume seeks this far before the signed samples (decoders converge)
USER_AGENT = "recall-operator"

Samples = npt.NDArray[np.float32]

_log = log.get("engine")


class ResumeInvalid(EngineError):
    """The source ends before the resume position: the checkpoint does not fit it."""

    def __init__(self, message: str) -> None:
        super().__init__("ResumeInvalid", message, permanent=False)


@dataclass(frozen=True)
class MediaOptions:
    """How sources are fetched and cut; `from_settings` maps the worker's settings."""

    chunk_seconds: float = 30.0
    snap_seconds: float = SNAP_SECONDS
    max_bytes: int = 2 * 1024**3
    http_timeout: float = 30.0
    max_seconds: float | None = None
    workdir: Path | None = None  # where downloads go; None = the system temp directory

    @classmethod
    def from_settings(cls, settings: WorkerSettings) -> MediaOptions:
        return cls(
            chunk_seconds=float(settings.chunk_seconds),
            max_bytes=settings.media_max_bytes,
            http_timeout=settings.http_timeout,
            max_seconds=settings.media_max_seconds,
        )

    def for_job(self, job: TranscriptionJob) -> MediaOptions:
        """These options with the job's `spec.engine.chunkSeconds`, when it sets one."""
        engine = job.spec.engine
        if engine is not None and engine.chunk_seconds:
            return dataclasses.replace(self, chunk_seconds=float(engine.chunk_seconds))
        return self


def load_job_media(job: TranscriptionJob, options: MediaOptions) -> AudioMedia:
    """`load_media` for a job: its `spec.engine.chunkSeconds` overrides the default."""
    return load_media(job.spec.source.url, options.for_job(job))


def load_media(url: str, options: MediaOptions) -> AudioMedia:
    """Fetch and probe the source at `url`; see the module contract."""
    began = time.monotonic()
    source = fetch(
        url, max_bytes=options.max_bytes, http_timeout=options.http_timeout, workdir=options.workdir
    )
    try:
        seconds = probe(source.path, url)
        if (
            options.max_seconds is not None
            and seconds is not None
            and seconds > options.max_seconds
        ):
            raise EngineError(
                "SourceTooLarge",
                f"{display_url(url)}: {seconds:.0f} s long, the limit is {options.max_seconds:g} s",
                permanent=True,
            )
        media = AudioMedia(source, options, seconds)
    except BaseException:
        source.remove()
        raise
    _log.info(
        "media_opened",
        url=display_url(url),
        bytes=source.size,
        estimated_seconds=None if seconds is None else round(seconds, 3),
        elapsed=round(time.monotonic() - began, 3),
    )
    return media


class AudioMedia(Media):
    """A fetched source, decoded and cut only while `chunks()` is iterated."""

    def __init__(self, source: Fetched, options: MediaOptions, seconds: float | None) -> None:
        self.source = source
        self.options = options
        self.cutting = Cutting(
            chunk_seconds=options.chunk_seconds,
            snap_seconds=options.snap_seconds,
            rate=SAMPLE_RATE,
            source=source.fingerprint,
        )
        self.estimated_samples = None if seconds is None else round(seconds * SAMPLE_RATE)
        self.decoded_samples: int | None = None
        self.resumed_by: str | None = None  # "seek" or "decode" after a resumed iteration began
        self._closed = threading.Event()

    def close(self) -> None:
        self._closed.set()
        self.source.remove()

    def chunks(
        self, resume: Resume | None = None, cancel: threading.Event | None = None
    ) -> Iterator[Chunk]:
        stop = _Either(self._closed, cancel)
        max_samples = (
            None
            if self.options.max_seconds is None
            else int(self.options.max_seconds * SAMPLE_RATE)
        )
        decoder = Decoder(self.source.path, self.source.url, max_samples=max_samples, stop=stop)
        start = resume.position if resume else 0
        began = time.monotonic()
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
            yield from cutter.feed(block)
        if stop.is_set():
            return
        if decoder.position == 0:
            raise EngineError(
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
        yield from cutter.finish()

    def _check_tail(self, decoder: Decoder, resume: Resume | None, began: float) -> None:
        if resume is None or resume.position == 0:
            return
        signature = tail_signature(decoder.tail)
        _log.info(
            "media_resumed",
            url=display_url(self.source.url),
            by=self.resumed_by,
            position=resume.position,
            seconds=round(time.monotonic() - began, 3),
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


class _Either:
    """Set when either event is."""

    def __init__(self, *events: threading.Event | None) -> None:
        self.events = [e for e in events if e is not None]

    def is_set(self) -> bool:
        return any(e.is_set() for e in self.events)


# --- fetch ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fetched:
    """A local file holding the source's bytes; `temporary` ones are removed by `remove()`."""

    url: str
    path: Path
    size: int
    fingerprint: str
    temporary: bool = False

    def remove(self) -> None:
        if self.temporary:
            self.path.unlink(missing_ok=True)


def fetch(url: str, *, max_bytes: int, http_timeout: float, workdir: Path | None = None) -> Fetched:
    """The source's bytes in a local file, with their fingerprint."""
    scheme = urlsplit(url).scheme.lower()
    if scheme == "file":
        path = local_path(url, max_bytes=max_bytes)
        st = path.stat()
        fingerprint = f"file:size={st.st_size};mtime={st.st_mtime_ns}"
        return Fetched(url, path, st.st_size, fingerprint)
    if scheme in ("http", "https"):
        path, digest = download(
            url, max_bytes=max_bytes, http_timeout=http_timeout, workdir=workdir
        )
        return Fetched(url, path, path.stat().st_size, f"sha256:{digest}", temporary=True)
    raise EngineError(
        "SourceRejected",
        f"{display_url(url)}: unsupported URL scheme (use file://, http:// or https://)",
        permanent=True,
    )


def local_path(url: str, *, max_bytes: int) -> Path:
    """The regular file a `file://` URL names, checked to exist and to fit `max_bytes`."""
    shown = display_url(url)
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise EngineError(
            "SourceRejected",
            f"{shown}: a file URL must not name a host (use file:///path)",
            permanent=True,
        )
    path = Path(unquote(parts.path))
    try:
        st = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        raise EngineError("SourceNotFound", f"{shown}: no such file", permanent=True) from None
    except PermissionError:
        raise EngineError("SourceRejected", f"{shown}: permission denied", permanent=True) from None
    except OSError as e:  # EIO, ESTALE on a network volume: it may come back
        raise EngineError(
            "SourceUnavailable", f"{shown}: cannot read: {e.strerror or e}", permanent=False
        ) from None
    if not path.is_file():
        raise EngineError("SourceNotFound", f"{shown}: not a regular file", permanent=True)
    if st.st_size > max_bytes:
        raise too_large(shown, max_bytes, st.st_size)
    return path


def download(
    url: str, *, max_bytes: int, http_timeout: float, workdir: Path | None
) -> tuple[Path, str]:
    """Stream `url` into a new temporary file; its path (the caller removes it) and SHA-256."""
    shown = display_url(url)
    try:
        with (
            httpx.Client(
                timeout=httpx.Timeout(http_timeout),
                follow_redirects=True,
                headers={"User-Agent": USER_AGENT},
            ) as client,
            client.stream("GET", url) as response,
        ):
            verdict = classify_http_status(response.status_code)
            if verdict is not None:
                reason, permanent = verdict
                raise EngineError(
                    reason,
                    f"{shown}: HTTP {response.status_code} {response.reason_phrase}",
                    permanent=permanent,
                )
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise too_large(shown, max_bytes, int(declared))
            return _save(response, shown, max_bytes, workdir, _suffix(url))
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as e:
        raise EngineError("SourceRejected", f"{shown}: invalid URL: {e}", permanent=True) from None
    except httpx.TimeoutException:
        raise EngineError(
            "SourceUnavailable", f"{shown}: timed out after {http_timeout:g} s", permanent=False
        ) from None
    except httpx.HTTPError as e:  # connection refused, reset, DNS, a broken body...
        detail = str(e) or type(e).__name__
        raise EngineError(
            "SourceUnavailable", f"{shown}: {_one_line(detail)}", permanent=False
        ) from None


def _save(
    response: httpx.Response, shown: str, max_bytes: int, workdir: Path | None, suffix: str
) -> tuple[Path, str]:
    fd, name = tempfile.mkstemp(prefix="recall-media-", suffix=suffix, dir=workdir)
    path = Path(name)
    digest = hashlib.sha256()
    try:
        received = 0
        with os.fdopen(fd, "wb") as f:
            for block in response.iter_bytes(1 << 20):
                received += len(block)
                if received > max_bytes:
                    raise too_large(shown, max_bytes, None)
                digest.update(block)
                f.write(block)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path, digest.hexdigest()


def classify_http_status(status: int) -> tuple[str, bool] | None:
    """(reason, permanent) for a failed download, or None when `status` is a success."""
    if 200 <= status < 300:
        return None
    if status in (408, 429) or status >= 500:
        return "SourceUnavailable", False
    if status in (404, 410):
        return "SourceNotFound", True
    return "SourceRejected", True  # other 4xx; 1xx/3xx only arrive here if redirects loop


def too_large(shown: str, max_bytes: int, size: int | None) -> EngineError:
    what = f"{size} bytes" if size is not None else "more"
    return EngineError(
        "SourceTooLarge", f"{shown}: {what}, the limit is {max_bytes} bytes", permanent=True
    )


def display_url(url: str) -> str:
    """The URL without its user info and query string, which often carry credentials."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # a malformed port or IPv6 literal: show what the scheme says
        return url.split("?", 1)[0].split("@")[-1]
    netloc = ("***@" if "@" in parts.netloc else "") + host + port
    query = "…" if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def _suffix(url: str) -> str:
    """The URL's file extension, if it looks like one: a hint for FFmpeg's format probe."""
    match = re.search(r"\.([A-Za-z0-9]{1,8})$", urlsplit(url).path)
    return f".{match.group(1)}" if match else ""


def _one_line(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


# --- decode ---------------------------------------------------------------------------------


def _open(path: Path, shown: str) -> tuple[Any, Any]:
    """The container at `path` and its first audio stream."""
    try:
        container = av.open(str(path))
    except av.FFmpegError as e:
        raise EngineError(
            "UndecodableMedia",
            f"{shown}: not a media file FFmpeg can read ({_av_reason(e)})",
            permanent=True,
        ) from None
    if not container.streams.audio:
        container.close()
        raise EngineError("UndecodableMedia", f"{shown}: no audio stream", permanent=True)
    return container, container.streams.audio[0]


def probe(path: Path, url: str) -> float | None:
    """The duration the container states for its first audio stream, in seconds (or None)."""
    container, stream = _open(path, display_url(url))
    with container:
        if stream.duration is not None and stream.time_base is not None:
            return float(stream.duration * stream.time_base)
        if container.duration is not None:
            return float(container.duration) / av.time_base
    return None


class Decoder:
    """The first audio stream of a file as 16 kHz mono float32 blocks, from a given sample on.

    After the first block (or the end), `tail` holds up to `TAIL_SECONDS` of the samples just
    before the start position; `position` counts the samples decoded up to the latest block.
    """

    def __init__(
        self,
        path: Path,
        url: str,
        *,
        rate: int = SAMPLE_RATE,
        max_samples: int | None = None,
        stop: _Either | None = None,
    ) -> None:
        self.path = path
        self.shown = display_url(url)
        self.rate = rate
        self.max_samples = max_samples
        self.stop = stop or _Either()
        self.position = 0
        self.tail: Samples = np.zeros(0, np.float32)
        self.tail_samples = round(TAIL_SECONDS * rate)

    def from_start(self, start: int = 0) -> Iterator[Samples]:
        """Decode from the first sample; blocks begin at sample `start`."""
        container, stream = _open(self.path, self.shown)
        with container:
            yield from self._trimmed(self._resampled(container.decode(stream), 0), start)

    def seek(self, start: int, tail: str) -> Iterator[Samples] | None:
        """Blocks from sample `start`, reached by seeking; None when that cannot be done
        exactly (no timestamps, a landing too late, or samples whose signature is not `tail`).
        """
        signed = start - self.tail_samples
        if not tail or signed < PREROLL_SECONDS * self.rate:
            return None
        container, stream = _open(self.path, self.shown)
        try:
            found = self._seek(container, stream, signed, start, tail)
        except (av.FFmpegError, ValueError, OverflowError, EngineError):
            found = None  # decoding from the start says what is wrong, if anything is
        if found is None:
            container.close()
            self.position, self.tail = 0, np.zeros(0, np.float32)
            return None
        return self._after_seek(container, found, start)

    def _seek(
        self, container: Any, stream: Any, signed: int, start: int, tail: str
    ) -> tuple[list[Samples], Iterator[Samples]] | None:
        src = stream.codec_context.sample_rate or stream.rate
        base = stream.time_base
        if not src or base is None:
            return None
        frames = container.decode(stream)
        first = next(frames, None)
        if first is None or first.pts is None:
            return None
        origin = first.pts  # the first decoded sample is sample 0
        target = Fraction(signed, self.rate) - Fraction(PREROLL_SECONDS).limit_denominator(1000)
        container.seek(int(target / base) + origin, stream=stream, backward=True)
        frames = container.decode(stream)
        # Resampling starts afresh at an input sample whose output sample is on the grid of
        # the uninterrupted run: the first input sample ≥ the landing that is a multiple of
        # in_unit, so both resamplers see the same phase.
        g = np.gcd(src, self.rate)
        in_unit, out_unit = src // g, self.rate // g
        for frame in frames:
            if frame.pts is None:
                return None
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
            blocks = self._resampled(_chain(_dropped(frame, drop), frames), position)
            held: list[Samples] = []  # the latest blocks up to `start`, to check and hand on
            for block in blocks:
                held.append(block)
                while held and self.position - sum(map(len, held)) + len(held[0]) <= signed:
                    held.pop(0)  # entirely before the signed samples
                if self.position >= start:
                    break
            if self.position < start:
                return None
            joined = np.concatenate(held)
            before = joined[: len(joined) - (self.position - start)]
            if tail_signature(before[-self.tail_samples :]) != tail:
                return None
            self.tail = before[-self.tail_samples :].copy()
            return [joined[len(before) :]], blocks
        return None

    def _after_seek(
        self, container: Any, found: tuple[list[Samples], Iterator[Samples]], start: int
    ) -> Iterator[Samples]:
        held, blocks = found
        with container:
            for block in held:
                if len(block):
                    yield block
            yield from blocks

    def _resampled(self, frames: Iterator[Any], position: int) -> Iterator[Samples]:
        """Resampled blocks of `frames`; `self.position` counts from `position`."""
        self.position = position
        resampler = av.AudioResampler(format="flt", layout="mono", rate=self.rate)
        try:
            for frame in frames:
                if self.stop.is_set():
                    return
                for out in resampler.resample(frame):
                    yield from self._counted(_mono(out))
            for out in resampler.resample(None):
                yield from self._counted(_mono(out))
        except (av.FFmpegError, ValueError) as e:
            raise EngineError(
                "UndecodableMedia",
                f"{self.shown}: cannot decode the audio ({_av_reason(e)})",
                permanent=True,
            ) from None

    def _counted(self, block: Samples) -> Iterator[Samples]:
        self.position += len(block)
        if self.max_samples is not None and self.position > self.max_samples:
            raise EngineError(
                "SourceTooLarge",
                f"{self.shown}: longer than the limit of {self.max_samples / self.rate:g} s",
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


def _dropped(frame: Any, drop: int) -> Any:
    """`frame` without its first `drop` samples."""
    if drop == 0:
        return frame
    data = frame.to_ndarray()
    channels = len(frame.layout.channels)
    cut = data[:, drop:] if frame.format.is_planar else data[:, drop * channels :]
    out = av.AudioFrame.from_ndarray(
        np.ascontiguousarray(cut), format=frame.format.name, layout=frame.layout.name
    )
    out.sample_rate = frame.sample_rate
    return out


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest


def _mono(frame: av.AudioFrame) -> Samples:
    return np.asarray(frame.to_ndarray(), dtype=np.float32).reshape(-1)


def _av_reason(e: Exception) -> str:
    strerror = getattr(e, "strerror", None)
    return _one_line(str(strerror or e or type(e).__name__), 120)


def tail_signature(samples: Samples) -> str:
    """A short signature of `samples` (CRC-32 of their float32 bytes): equal only when they are
    bit-identical, which is what a seek must reproduce."""
    data = np.ascontiguousarray(samples, dtype="<f4").tobytes()
    return f"{zlib.crc32(data):08x}"


# --- cut ------------------------------------------------------------------------------------


class Cutter:
    """Cuts a stream of sample blocks into chunks, holding at most one chunk and one block.

    Feed blocks in order with `feed`, then call `finish` once the stream has ended. Cuts are
    those the whole array would get: a cut is made when more than `chunk_seconds` of samples
    follow the previous one, at the nominal length or moved back into a pause within the last
    `snap_seconds` (the quietest `QUIET_SECONDS` stretch, in steps of `STEP_SECONDS`, when it
    has less than `QUIETER` times the energy of the stretch just before the nominal cut; ties go
    to the later stretch, so chunks stay as long as possible). `start` and `index` place the
    first sample fed (a resume); `recent` holds the samples just before it, for `Chunk.tail`.
    """

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


# --- encode ---------------------------------------------------------------------------------


def encode_wav(samples: Samples, rate: int = SAMPLE_RATE) -> bytes:
    """`samples` (float, -1..1) as a mono 16-bit PCM WAV file, in memory."""
    pcm = (np.clip(samples, -1.0, 1.0) * 32767.0).round().astype("<i2")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return buffer.getvalue()
