"""Transcript output formats: plain text, SubRip (srt), WebVTT (vtt) and JSON. Pure.

The worker renders the formats a job's `spec.output` asks for next to its transcript, and the
operator publishes those bytes; `recall transcript` renders the same way.
"""

from __future__ import annotations

import json

from recall.resources import Format
from recall.transcripts.layout import Transcript

CONTENT_TYPES = {
    "json": "application/json",
    "srt": "application/x-subrip",
    "vtt": "text/vtt",
    "txt": "text/plain; charset=utf-8",
}


def timestamp(seconds: float, separator: str) -> str:
    """HH:MM:SS<sep>mmm, as SubRip (',') and WebVTT ('.') write times."""
    millis = max(0, round(seconds * 1000))
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"


def render(transcript: Transcript, fmt: Format) -> str:
    segments = [s for s in transcript.segments if s.text.strip()]
    if fmt == "txt":
        return transcript.text + "\n"
    if fmt == "json":
        return (
            json.dumps(
                {
                    "text": transcript.text,
                    "duration": transcript.duration,
                    "engine": transcript.engine,
                    "segments": [s.model_dump() for s in segments],
                },
                indent=2,
                ensure_ascii=False,
            )
            + "\n"
        )
    if fmt == "srt":
        blocks = [
            f"{i}\n{timestamp(s.start, ',')} --> {timestamp(s.end, ',')}\n{s.text.strip()}\n"
            for i, s in enumerate(segments, start=1)
        ]
        return "\n".join(blocks)
    if fmt == "vtt":
        blocks = [
            f"{timestamp(s.start, '.')} --> {timestamp(s.end, '.')}\n{s.text.strip()}\n"
            for s in segments
        ]
        return "WEBVTT\n\n" + "\n".join(blocks)
    raise ValueError(f"unknown format {fmt!r}")
