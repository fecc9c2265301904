"""Opening a source with PyAV: its first audio stream (`UndecodableMedia`, permanent, for what
FFmpeg cannot read or a file without audio), its stated duration and channels, how a PCM WAV
is read, which codecs decode the same after a seek, and the length limit's tolerance."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import av

from recall.media.fetch import display_url, one_line
from recall.resources.errors import JobFailure

# A source may be this share longer than `max_seconds`: encoder padding and priming make an
# m4a stated as 100.0 s decode to 100.008 s.
LIMIT_TOLERANCE = 0.01

# Decoders known to give the same samples after a seek once they have decoded the preroll
# (measured with the tests' files). Others (AAC's noise substitution uses a random generator
# that a seek resets) resume by decoding from the start.
SEEK_EXACT = frozenset({"flac", "mp3", "mp3float", "opus", "libopus", "vorbis", "libvorbis"})


def seconds_text(seconds: float) -> str:
    """`seconds` as a limit message shows them: to the millisecond, without trailing zeros."""
    return f"{seconds:.3f}".rstrip("0").rstrip(".")


def over_limit(seconds: float, max_seconds: float | None) -> bool:
    """Whether a source `seconds` long is refused under `max_seconds` (with the tolerance)."""
    return max_seconds is not None and seconds > max_seconds * (1 + LIMIT_TOLERANCE)


def tolerated(max_samples: int) -> int:
    """`max_samples` with the tolerance: the most a source may decode to."""
    return math.floor(max_samples * (1 + LIMIT_TOLERANCE))


def seek_exact(stream: Any) -> bool:
    """Whether the stream's codec decodes the same samples after a seek (PCM or `SEEK_EXACT`)."""
    name = str(getattr(stream.codec_context.codec, "name", "") or "")
    return name.startswith("pcm_") or name in SEEK_EXACT


# A PCM WAV is read a second a packet: FFmpeg's default 4,096 bytes (128 ms of 16 kHz mono) a
# packet cost four times the CPU (bench/enginecpu.py). Its header says all of the stream, so
# FFmpeg probes no packets ahead (probesize): at a second a packet, that was most of the cost.
WAV_PCM_TAGS = (1, 3)  # WAVE_FORMAT_PCM, WAVE_FORMAT_IEEE_FLOAT
WAV_EXTENSIBLE = 0xFFFE
WAV_PACKET_BYTES = (1024, 1 << 22)  # the bounds FFmpeg's wav demuxer takes for max_size


def open_audio(path: Path, shown: str) -> tuple[Any, Any]:
    """The container at `path` and its first audio stream."""
    try:
        container = av.open(str(path), options=wav_options(path))
    except av.FFmpegError as e:
        raise JobFailure(
            "UndecodableMedia",
            f"{shown}: not a media file FFmpeg can read ({av_reason(e)})",
            permanent=True,
        ) from None
    if not container.streams.audio:
        container.close()
        raise JobFailure("UndecodableMedia", f"{shown}: no audio stream", permanent=True)
    return container, container.streams.audio[0]


def wav_options(path: Path) -> dict[str, str]:
    """FFmpeg's options for reading `path` in packets of about a second, when it is a PCM WAV
    (RIFF or RF64) whose format chunk lies in its first 64 KiB; none for anything else."""
    try:
        with path.open("rb") as f:
            head = f.read(65_536)
    except OSError:
        return {}  # opening it says what is wrong
    if len(head) < 12 or head[:4] not in (b"RIFF", b"RF64") or head[8:12] != b"WAVE":
        return {}
    at = 12
    while at + 8 <= len(head):
        kind, size = head[at : at + 4], int.from_bytes(head[at + 4 : at + 8], "little")
        body = head[at + 8 : at + 8 + size]
        if kind == b"fmt ":
            if len(body) < 16:
                return {}
            tag = int.from_bytes(body[0:2], "little")
            if tag == WAV_EXTENSIBLE and len(body) >= 26:
                tag = int.from_bytes(body[24:26], "little")  # the subformat GUID's first field
            byte_rate = int.from_bytes(body[8:12], "little")
            if tag not in WAV_PCM_TAGS:
                return {}
            low, high = WAV_PACKET_BYTES
            return {"max_size": str(min(max(byte_rate, low), high)), "probesize": "32"}
        at += 8 + size + size % 2  # chunks are padded to an even length
    return {}


def probe(path: Path, url: str) -> float | None:
    """The duration the container states for its first audio stream, in seconds (or None)."""
    container, stream = open_audio(path, display_url(url))
    with container:
        if stream.duration is not None and stream.time_base is not None:
            return float(stream.duration * stream.time_base)
        if container.duration is not None:
            return float(container.duration) / av.time_base
    return None


def channels_of(path: Path, url: str) -> int:
    """How many channels the first audio stream has (1 when the container does not say)."""
    container, stream = open_audio(path, display_url(url))
    with container:
        layout = getattr(stream, "layout", None)
        count = len(layout.channels) if layout is not None else 0
        return max(1, count or int(getattr(stream.codec_context, "channels", 0) or 0))


def av_reason(e: Exception) -> str:
    """What FFmpeg said, on one line."""
    strerror = getattr(e, "strerror", None)
    return one_line(str(strerror or e or type(e).__name__), 120)
