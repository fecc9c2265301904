"""Audio preparation for the real engines: fetch a source, decode it, cut it into chunks.

Contract:
- `load_media(url, options)` returns the whole source as 16 kHz mono float32 samples, cut
  into `Chunk`s of at most `chunk_seconds` each (the last one may be shorter). Chunks are in
  order, contiguous and cover every sample; `Chunk.start`/`duration` are in seconds and
  `Media.duration` is the length of the decoded audio. The same source always yields the same
  chunks, so a resumed attempt can skip the chunks a checkpoint already holds.
- A cut is moved back, by at most `SNAP_SECONDS`, into a clearly quieter 100 ms stretch when
  there is one, so a word is less often split between two chunks. Uniformly loud audio is cut
  at exactly `chunk_seconds`.
- Sources: `file:///path` is read in place; `http(s)://` is streamed to a temporary file
  (removed before `load_media` returns, whatever happens) with `http_timeout` on connect and
  on every read, and at most `max_bytes` accepted (by Content-Length and by counting).
- Every failure is an `EngineError` with a one-line message naming the URL (user info and
  query string hidden: they often hold credentials). Permanent: SourceNotFound (missing file,
  HTTP 404/410), SourceRejected (other 4xx, unsupported URL), SourceTooLarge, UndecodableMedia
  (not media, no audio stream, no samples). Retriable: SourceUnavailable (timeouts,
  connection errors, HTTP 5xx, 408 and 429, I/O errors).
- Memory: the decoded audio is held whole, 64 KB per second (230 MB per hour). Set
  `max_seconds` to bound it; `max_bytes` alone does not (a compressed hour is small).

Pure parts (`chunk_bounds`, `split`, `classify_http_status`, `display_url`, `encode_wav`)
take no I/O and are unit-tested directly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import re
import tempfile
import time
import wave
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit, urlunsplit

import av
import httpx
import numpy as np
import numpy.typing as npt

from recall import log
from recall.engines.base import Chunk, EngineError, Media

if TYPE_CHECKING:
    from recall.models import TranscriptionJob
    from recall.settings import WorkerSettings

SAMPLE_RATE = 16_000
SNAP_SECONDS = 2.0  # how far back from a nominal cut to look for a pause
QUIET_SECONDS = 0.1  # a pause is the quietest stretch this long (a gap between words)...
STEP_SECONDS = 0.01  # ...looked for in steps of this
QUIETER = 0.5  # and used when below this share of the energy just before the nominal cut
USER_AGENT = "recall-operator"

Samples = npt.NDArray[np.float32]

_log = log.get("engine")


@dataclass(frozen=True)
class MediaOptions:
    """How sources are fetched and cut; `from_settings` maps the worker's settings."""

    chunk_seconds: float = 30.0
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


def load_job_media(job: TranscriptionJob, options: MediaOptions) -> Media:
    """`load_media` for a job: its `spec.engine.chunk_seconds` overrides the default."""
    engine = job.spec.engine
    if engine is not None and engine.chunk_seconds:
        options = dataclasses.replace(options, chunk_seconds=float(engine.chunk_seconds))
    return load_media(job.spec.source.url, options)


def load_media(url: str, options: MediaOptions) -> Media:
    """Fetch, decode and cut the source at `url`; see the module contract."""
    began = time.monotonic()
    with fetched(
        url, max_bytes=options.max_bytes, http_timeout=options.http_timeout, workdir=options.workdir
    ) as path:
        size = path.stat().st_size
        samples = decode(path, url, max_seconds=options.max_seconds)
    media = split(samples, SAMPLE_RATE, options.chunk_seconds)
    _log.info(
        "media_loaded",
        url=display_url(url),
        bytes=size,
        seconds=round(media.duration, 3),
        chunks=len(media.chunks),
        elapsed=round(time.monotonic() - began, 3),
    )
    return media


# --- fetch ----------------------------------------------------------------------------------


@contextlib.contextmanager
def fetched(
    url: str, *, max_bytes: int, http_timeout: float, workdir: Path | None = None
) -> Iterator[Path]:
    """A local path holding the source's bytes for the duration of the `with` block."""
    scheme = urlsplit(url).scheme.lower()
    if scheme == "file":
        yield local_path(url, max_bytes=max_bytes)
    elif scheme in ("http", "https"):
        path = download(url, max_bytes=max_bytes, http_timeout=http_timeout, workdir=workdir)
        try:
            yield path
        finally:
            path.unlink(missing_ok=True)
    else:
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


def download(url: str, *, max_bytes: int, http_timeout: float, workdir: Path | None) -> Path:
    """Stream `url` into a new temporary file and return its path (the caller removes it)."""
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
) -> Path:
    fd, name = tempfile.mkstemp(prefix="recall-media-", suffix=suffix, dir=workdir)
    path = Path(name)
    try:
        received = 0
        with os.fdopen(fd, "wb") as f:
            for block in response.iter_bytes(1 << 20):
                received += len(block)
                if received > max_bytes:
                    raise too_large(shown, max_bytes, None)
                f.write(block)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path


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


def decode(
    path: Path, url: str, *, rate: int = SAMPLE_RATE, max_seconds: float | None = None
) -> Samples:
    """The first audio stream of the file at `path` as mono float32 samples at `rate`."""
    shown = display_url(url)
    try:
        container = av.open(str(path))
    except av.FFmpegError as e:
        raise EngineError(
            "UndecodableMedia",
            f"{shown}: not a media file FFmpeg can read ({_av_reason(e)})",
            permanent=True,
        ) from None
    parts: list[Samples] = []
    count = 0
    limit = None if max_seconds is None else int(max_seconds * rate)
    with container:
        if not container.streams.audio:
            raise EngineError("UndecodableMedia", f"{shown}: no audio stream", permanent=True)
        stream = container.streams.audio[0]
        resampler = av.AudioResampler(format="flt", layout="mono", rate=rate)
        try:
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    parts.append(_mono(out))
                    count += out.samples
                if limit is not None and count > limit:
                    raise EngineError(
                        "SourceTooLarge",
                        f"{shown}: longer than the limit of {max_seconds:g} s",
                        permanent=True,
                    )
            for out in resampler.resample(None):
                parts.append(_mono(out))
        except (av.FFmpegError, ValueError) as e:
            raise EngineError(
                "UndecodableMedia",
                f"{shown}: cannot decode the audio ({_av_reason(e)})",
                permanent=True,
            ) from None
    if not parts or count == 0:
        raise EngineError("UndecodableMedia", f"{shown}: no audio samples", permanent=True)
    return np.concatenate(parts).astype(np.float32, copy=False)


def _mono(frame: av.AudioFrame) -> Samples:
    return np.asarray(frame.to_ndarray(), dtype=np.float32).reshape(-1)


def _av_reason(e: Exception) -> str:
    strerror = getattr(e, "strerror", None)
    return _one_line(str(strerror or e or type(e).__name__), 120)


# --- split ----------------------------------------------------------------------------------


def chunk_bounds(
    samples: Samples, rate: int, chunk_seconds: float, snap_seconds: float = SNAP_SECONDS
) -> list[tuple[int, int]]:
    """Sample ranges [start, end) that cover `samples` in order, each ≤ `chunk_seconds`.

    Each cut is placed at the nominal length, or moved back by at most `snap_seconds` to the
    middle of the quietest `QUIET_SECONDS` stretch (stepping by `STEP_SECONDS`) when that
    stretch has less than `QUIETER` times the energy of the stretch just before the nominal cut.
    Ties go to the later stretch, so chunks stay as long as possible.
    """
    size = max(1, round(chunk_seconds * rate))
    step = max(1, round(STEP_SECONDS * rate))
    width = max(1, round(QUIET_SECONDS / STEP_SECONDS))  # in steps
    steps_back = min(int(snap_seconds * rate), size // 2) // step
    n = len(samples)
    bounds: list[tuple[int, int]] = []
    start = 0
    while n - start > size:
        cut = start + size
        if steps_back >= width:
            lo = cut - steps_back * step
            hops = samples[lo:cut].astype(np.float64).reshape(steps_back, step)
            hop_energy = np.sum(hops * hops, axis=1)
            # energy of every stretch of `width` consecutive steps
            stretch = np.convolve(hop_energy, np.ones(width), mode="valid")
            quietest = len(stretch) - 1 - int(np.argmin(stretch[::-1]))
            if stretch[quietest] < QUIETER * stretch[-1]:
                cut = lo + quietest * step + (width * step) // 2
        bounds.append((start, cut))
        start = cut
    if n > start:
        bounds.append((start, n))
    return bounds


def split(samples: Samples, rate: int, chunk_seconds: float) -> Media:
    """`Media` of `samples`, cut by `chunk_bounds`; each chunk holds a view of its samples."""
    chunks = [
        Chunk(index=i, start=s / rate, duration=(e - s) / rate, audio=samples[s:e])
        for i, (s, e) in enumerate(chunk_bounds(samples, rate, chunk_seconds))
    ]
    return Media(chunks=chunks, duration=len(samples) / rate)


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
