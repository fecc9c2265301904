"""Transcript output formats: plain text, SubRip (srt), WebVTT (vtt), recall's JSON and a JSON in
the layout of AWS Transcribe (aws.json). Pure.

The worker renders the formats a job's `spec.output` asks for next to its transcript, and the
operator publishes those bytes; `recall transcript` renders the same way. Field by field:
docs/transcripts.md.

- `json`: `text`, `duration`, `engine`, `model`, `modelDigest`, `language`,
  `languageProbability`, `wordTimings`, and `segments`, each `{start, end, text}` with
  `confidence` when known and `words` (`{start, end, word, probability}`) when the segment has
  word timings. `wordTimings` is what the segments hold, not what the job asked: true when every
  segment has its words (an empty transcript: when the job asked for them), false when some
  segment has none (the engine aligned no word, or the job did not ask).
- `aws.json`: `jobName`, `status` "COMPLETED", `results.transcripts[0].transcript`,
  `results.items` (`id`, `type` pronunciation or punctuation, `start_time`/`end_time` as
  decimal strings on pronunciations, `alternatives[{content, confidence}]`) and
  `results.audio_segments` (each segment with the ids of its items), as AWS writes them, so
  tools that read AWS Transcribe's output read it. A word's trailing punctuation is an item of
  its own. A segment without word timings is split into its text's words, their times in
  proportion within the segment and their confidence the segment's (`wordTimings` false in
  `json`, and that segment without `words`, say so).
- `srt`, `vtt`: cues from `recall.transcripts.subtitles` under the transcript's rules.
"""

from __future__ import annotations

import json
from typing import Any

from recall.media.types import Segment
from recall.resources import Format
from recall.transcripts.layout import Transcript
from recall.transcripts.subtitles import Rules, cues, split, timed_words, write

CONTENT_TYPES = {
    "json": "application/json",
    "aws.json": "application/json",
    "srt": "application/x-subrip",
    "vtt": "text/vtt",
    "txt": "text/plain; charset=utf-8",
}
PUNCTUATION = ".,?!;:"


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
        return _dump(segment_json(transcript, segments))
    if fmt == "aws.json":
        return _dump(aws_json(transcript, segments))
    if fmt in ("srt", "vtt"):
        return write(cues(segments, Rules.from_data(transcript.subtitles)), fmt)
    raise ValueError(f"unknown format {fmt!r}")


def _dump(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def segment_json(transcript: Transcript, segments: list[Segment]) -> dict[str, Any]:
    out: list[dict[str, Any]] = []
    for s in segments:
        item: dict[str, Any] = {"start": s.start, "end": s.end, "text": s.text}
        if s.confidence is not None:
            item["confidence"] = s.confidence
        if timed_words(s):
            item["words"] = [
                {"start": w.start, "end": w.end, "word": w.text, "probability": w.probability}
                for w in s.words or []
                if w.text.strip()
            ]
        out.append(item)
    return {
        "text": transcript.text,
        "duration": transcript.duration,
        "engine": transcript.engine,
        "model": transcript.model,
        "modelDigest": transcript.model_digest,
        "language": transcript.language,
        "languageProbability": transcript.language_probability,
        "wordTimings": word_timings(transcript, segments),
        "segments": out,
    }


def word_timings(transcript: Transcript, segments: list[Segment]) -> bool:
    """Whether every one of `segments` has word timings (none: whether the job asked)."""
    if not segments:
        return transcript.word_timings
    return all(timed_words(s) for s in segments)


def _decimal(value: float) -> str:
    """A time or confidence as AWS writes it: a decimal string ("1.09", "0.998")."""
    text = f"{value:.3f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def aws_json(transcript: Transcript, segments: list[Segment]) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    audio_segments: list[dict[str, Any]] = []
    for s in segments:
        ids: list[int] = []
        if timed_words(s):
            timed = [(w.text.strip(), w.start, w.end, w.probability) for w in s.words or []]
        else:  # proportional times, the segment's confidence
            confidence = s.confidence if s.confidence is not None else 1.0
            timed = [(t.text, t.start, t.end, confidence) for t in split(s)]
        for text, start, end, probability in timed:
            word = text.rstrip(PUNCTUATION)
            marks = text[len(word) :]
            if word:
                ids.append(len(items))
                items.append(
                    {
                        "id": len(items),
                        "type": "pronunciation",
                        "start_time": _decimal(start),
                        "end_time": _decimal(end),
                        "alternatives": [{"content": word, "confidence": _decimal(probability)}],
                    }
                )
            for mark in marks:
                ids.append(len(items))
                items.append(
                    {
                        "id": len(items),
                        "type": "punctuation",
                        "alternatives": [{"content": mark, "confidence": "0.0"}],
                    }
                )
        audio_segments.append(
            {
                "id": len(audio_segments),
                "transcript": s.text.strip(),
                "start_time": _decimal(s.start),
                "end_time": _decimal(s.end),
                "items": ids,
            }
        )
    results: dict[str, Any] = {
        "transcripts": [{"transcript": transcript.text}],
        "items": items,
        "audio_segments": audio_segments,
    }
    if transcript.language:
        results["language_code"] = transcript.language
    return {
        "jobName": transcript.job,
        "status": "COMPLETED",
        "results": results,
    }
