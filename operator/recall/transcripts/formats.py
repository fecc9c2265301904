"""Transcript output formats: plain text, SubRip (srt), WebVTT (vtt), recall's JSON and a JSON in
the layout of AWS Transcribe (aws.json). Pure.

The worker renders a job's outputs beside its transcript and the operator publishes those bytes.
Field by field: docs/transcripts.md; aws.json: `recall.transcripts.aws`; srt and vtt cues:
`recall.transcripts.subtitles`, under the transcript's rules.

- `json` shows a segment's `words` only when the job asked for them and the segment has word
  timings; its `wordTimings` is what the segments hold: true when every segment has its words
  (an empty transcript: when the job asked), false when some has none. The other formats time
  their items and cues by the words whenever the transcript has them.
- Languages (docs/languages.md): `json` gives a segment its `language` under `languageScope:
  segment`. With `transcript.translate: en`, each of srt, vtt and txt asked for has an English
  twin (`en.srt`, …: `output_formats`), and `json` a `translation` `{language, text, segments}`.
- Who said it (the speaker, else the channel): `json` gives each segment and word its `speaker`
  and `channel`; `txt` is a paragraph a turn, each `S1: …`; srt and vtt: `subtitles`.
- Redacted spans read `[EMAIL]`, `[PHONE]`, … in every format but `aws.json`.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from recall.media.types import Segment, Word
from recall.resources import Format, OutputFormat, TranscriptionJob
from recall.transcripts.aws import aws_json
from recall.transcripts.records import Transcript
from recall.transcripts.subtitles import Rules, cues, write
from recall.transcripts.words import Token, text_of, timed_words, tokens

TRANSLATED: dict[str, Format] = {"en.srt": "srt", "en.vtt": "vtt", "en.txt": "txt"}


def output_formats(job: TranscriptionJob) -> list[OutputFormat]:
    """The outputs `job` writes and publishes: its `spec.output.formats`, and with
    `transcript.translate: en` the English `en.<format>` of each of srt, vtt and txt."""
    formats: list[OutputFormat] = list(job.spec.output.formats) if job.spec.output else []
    t = job.spec.transcript
    if t is not None and t.translate == "en":
        formats += [name for name, fmt in TRANSLATED.items() if fmt in formats]  # type: ignore[misc]
    return formats


def translated(transcript: Transcript) -> Transcript:
    """The English translation as a transcript of its own, timed as the segments it translates."""
    segments = [
        s.model_copy(update={"text": s.translation, "words": None, "language": "en"})
        for s in transcript.segments
        if s.translation and s.translation.strip()
    ]
    return dataclasses.replace(
        transcript, segments=segments, language="en", language_probability=None
    )


def render(transcript: Transcript, fmt: Format | str) -> str:
    if fmt in TRANSLATED:
        return render(translated(transcript), TRANSLATED[fmt])
    segments = [s for s in transcript.segments if s.text.strip()]
    if fmt == "txt":
        return txt(transcript, segments)
    if fmt == "json":
        return _dump(segment_json(transcript, segments))
    if fmt == "aws.json":
        return _dump(aws_json(transcript, segments))
    if fmt in ("srt", "vtt"):
        rules = Rules.from_data(transcript.subtitles)
        found = cues(segments, rules, prefix=fmt == "srt", duration=transcript.duration or None)
        return write(found, "srt" if fmt == "srt" else "vtt")
    raise ValueError(f"unknown format {fmt!r}")


def labelled(segments: list[Segment]) -> bool:
    """Whether some segment or word says who said it."""
    return any(s.who or any(w.who for w in s.words or []) for s in segments)


def turns(segments: list[Segment]) -> list[tuple[str | None, str]]:
    """The text of `segments` in turns: (who, what they said), one per change of speaker."""
    out: list[tuple[str | None, list[Token]]] = []
    for word in tokens(segments):
        if out and out[-1][0] == word.who:
            out[-1][1].append(word)
        else:
            out.append((word.who, [word]))
    return [(who, text_of(words)) for who, words in out]


def txt(transcript: Transcript, segments: list[Segment]) -> str:
    """The text; with speakers or channels, a paragraph a turn, each `S1: ...`."""
    if not labelled(segments):
        return transcript.text + "\n"
    return "\n\n".join(f"{who}: {text}" if who else text for who, text in turns(segments)) + "\n"


def _dump(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def segment_json(transcript: Transcript, segments: list[Segment]) -> dict[str, Any]:
    out: list[dict[str, Any]] = []
    for s in segments:
        item: dict[str, Any] = {"start": s.start, "end": s.end, "text": s.text}
        if s.confidence is not None:
            item["confidence"] = s.confidence
        item.update(_who(s.speaker, s.channel))
        if s.language:
            item["language"] = s.language
        if transcript.word_timings and timed_words(s):
            item["words"] = [_word_json(w) for w in s.words or [] if w.text.strip()]
        out.append(item)
    data: dict[str, Any] = {
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
    if any(s.translation for s in segments):
        english = translated(transcript)
        data["translation"] = {
            "language": "en",
            "text": english.text,
            "segments": [
                {"start": t.start, "end": t.end, "text": t.text} for t in english.segments
            ],
        }
    return data


def _who(speaker: str | None, channel: str | None) -> dict[str, str]:
    return {k: v for k, v in (("speaker", speaker), ("channel", channel)) if v}


def _word_json(w: Word) -> dict[str, Any]:
    out: dict[str, Any] = {"start": w.start, "end": w.end, "word": w.text}
    out["probability"] = w.probability
    out.update(_who(w.speaker, w.channel))
    if w.redacted:
        out["redacted"] = w.redacted
    return out


def word_timings(transcript: Transcript, segments: list[Segment]) -> bool:
    """Whether the job asked for words and every one of `segments` (if any) has them."""
    if not segments or not transcript.word_timings:
        return transcript.word_timings
    return all(timed_words(s) for s in segments)
