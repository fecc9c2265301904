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

Languages (docs/languages.md): `json` gives a segment its `language` when it was decided per
segment (`languageScope: segment`); `aws.json` gives every pronunciation its `language_code`
and `results.language_identification` (`[{code, score}]`: the detected language's probability,
or under segment scope each language's share of the speech), as AWS writes them for language
identification, in AWS's locales (`de-DE`; `aws_locale`). With
`transcript.translate: en` the English translation (each segment's `translation`) is rendered
as the outputs `en.srt`, `en.vtt` and `en.txt` (beside each of srt, vtt and txt asked for;
`output_formats`), and `json` has `translation`: `{language, text, segments}`, its segments
with the times of the segments they translate.

Who said it (the speaker, else the channel of a split file): `json` gives each segment and word
its `speaker` and `channel`; `aws.json` gives each item and audio segment its `speaker_label`
(`spk_0` for S1, as AWS numbers them) and `channel_label` (`ch_0`), with
`results.speaker_labels` (turns: runs of one speaker's items) and `results.channel_labels` (each
channel's items) as AWS writes them; `vtt` a voice tag per cue (`<v S1>`); `srt` and `txt` the
label before the first words after each change (`S1: `, a turn a paragraph in `txt`).
A word Whisper split at a hyphen ("ill" + "-disposed") is one item ("ill-disposed").
Redacted spans (`recall.transcripts.redact`) read `[EMAIL]`, `[PHONE]`, ... in every format but
`aws.json`, which writes them as AWS's content redaction does: `[PII]` with a `redactions`
entry naming the category, and `isRedacted` true. Words are shown in `json` only when the job
asked for them (`wordTimings`); the other formats time their items and cues by them whenever
the transcript has them.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Any

from recall.media.types import Segment, Word
from recall.resources import Format, OutputFormat, TranscriptionJob
from recall.transcripts.layout import Transcript
from recall.transcripts.subtitles import (
    Rules,
    cues,
    goes_on,
    joined,
    spaced,
    split,
    timed_words,
    write,
)

CONTENT_TYPES = {
    "json": "application/json",
    "aws.json": "application/json",
    "srt": "application/x-subrip",
    "vtt": "text/vtt",
    "txt": "text/plain; charset=utf-8",
    "en.srt": "application/x-subrip",
    "en.vtt": "text/vtt",
    "en.txt": "text/plain; charset=utf-8",
}
PUNCTUATION = ".,?!;:"
# A redacted span's type as AWS's content redaction names its category.
AWS_CATEGORY = {
    "email": "EMAIL",
    "phone": "PHONE",
    "card": "CREDIT_DEBIT_NUMBER",
    "iban": "BANK_ACCOUNT_NUMBER",
    "nationalId": "SSN",
}
TAG = re.compile(r"\[(EMAIL|PHONE|CARD|IBAN|NATIONAL_ID)\]")

# The locales AWS Transcribe writes for a language (its `language_code`), where it has one; any
# other language is written as its ISO 639-1 code.
AWS_LOCALES = {
    "af": "af-ZA", "ar": "ar-SA", "ca": "ca-ES", "cs": "cs-CZ", "cy": "cy-GB", "da": "da-DK",
    "de": "de-DE", "el": "el-GR", "en": "en-US", "es": "es-ES", "eu": "eu-ES", "fa": "fa-IR",
    "fi": "fi-FI", "fr": "fr-FR", "gl": "gl-ES", "he": "he-IL", "hi": "hi-IN", "hr": "hr-HR",
    "hu": "hu-HU", "id": "id-ID", "is": "is-IS", "it": "it-IT", "ja": "ja-JP", "ko": "ko-KR",
    "lt": "lt-LT", "lv": "lv-LV", "ms": "ms-MY", "nl": "nl-NL", "no": "no-NO", "pl": "pl-PL",
    "pt": "pt-PT", "ro": "ro-RO", "ru": "ru-RU", "sk": "sk-SK", "sl": "sl-SI", "sr": "sr-RS",
    "sv": "sv-SE", "sw": "sw-KE", "ta": "ta-IN", "te": "te-IN", "th": "th-TH", "tl": "tl-PH",
    "tr": "tr-TR", "uk": "uk-UA", "vi": "vi-VN", "zh": "zh-CN",
}  # fmt: skip


def aws_locale(code: str) -> str:
    """The language code AWS Transcribe writes for `code` (de → de-DE), else `code` itself."""
    return AWS_LOCALES.get(code, code)


def timestamp(seconds: float, separator: str) -> str:
    """HH:MM:SS<sep>mmm, as SubRip (',') and WebVTT ('.') write times."""
    millis = max(0, round(seconds * 1000))
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"


TRANSLATED: dict[str, Format] = {"en.srt": "srt", "en.vtt": "vtt", "en.txt": "txt"}


def output_formats(job: TranscriptionJob) -> list[OutputFormat]:
    """The outputs `job` writes and publishes: its `spec.output.formats`, and with
    `transcript.translate: en` the English `en.<format>` of each of srt, vtt and txt."""
    formats: list[OutputFormat] = list(job.spec.output.formats) if job.spec.output else []
    t = job.spec.transcript
    if t is not None and t.translate == "en":
        asked = list(formats)
        formats += [name for name, fmt in TRANSLATED.items() if fmt in asked]  # type: ignore[misc]
    return formats


def translated(transcript: Transcript) -> Transcript:
    """The English translation as a transcript of its own: each translated segment, at the
    times of the segment it translates."""
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
        return write(cues(segments, rules, prefix=fmt == "srt"), "srt" if fmt == "srt" else "vtt")
    raise ValueError(f"unknown format {fmt!r}")


def labelled(segments: list[Segment]) -> bool:
    """Whether some segment or word says who said it."""
    return any(s.who or any(w.who for w in s.words or []) for s in segments)


def turns(segments: list[Segment]) -> list[tuple[str | None, str]]:
    """The text of `segments` in turns: (who, what they said), one per change of speaker."""
    out: list[tuple[str | None, list[str]]] = []
    for s in segments:
        if timed_words(s):
            said = [(w.who or s.who, w.text.strip()) for w in s.words or [] if w.text.strip()]
        else:
            said = [(s.who, t) for t in s.text.split()]
        for who, word in said:
            if out and out[-1][0] == who:
                out[-1][1].append(word)
            else:
                out.append((who, [word]))
    return [(who, joined(words)) for who, words in out]


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


def language_identification(transcript: Transcript, segments: list[Segment]) -> list[Any]:
    """AWS's `language_identification`: under segment scope each language with its share of
    the speech, else the detected language with its probability (none when it was given)."""
    seconds: dict[str, float] = {}
    for s in segments:
        if s.language:
            seconds[s.language] = seconds.get(s.language, 0.0) + max(0.0, s.end - s.start)
    total = sum(seconds.values())
    if total > 0:
        ranked = sorted(seconds.items(), key=lambda kv: -kv[1])
        return [{"score": _decimal(v / total), "code": aws_locale(k)} for k, v in ranked]
    if transcript.language and transcript.language_probability is not None:
        score = _decimal(transcript.language_probability)
        return [{"score": score, "code": aws_locale(transcript.language)}]
    return []


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
    """Whether the job asked for words and every one of `segments` has them (no segments:
    whether the job asked)."""
    if not segments or not transcript.word_timings:
        return transcript.word_timings
    return all(timed_words(s) for s in segments)


def _decimal(value: float) -> str:
    """A time or confidence as AWS writes it: a decimal string ("1.09", "0.998")."""
    text = f"{value:.3f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def speaker_label(speaker: str) -> str:
    """AWS's label for a speaker: spk_0 for S1, spk_1 for S2, ..."""
    if speaker[:1] == "S" and speaker[1:].isdigit():
        return f"spk_{int(speaker[1:]) - 1}"
    return speaker


def channel_label(channel: str) -> str:
    """AWS's label for a channel: ch_0 for ch0."""
    return f"ch_{channel[2:]}" if channel.startswith("ch") and channel[2:].isdigit() else channel


@dataclass(frozen=True)
class _Said:
    """One word as aws.json writes it: hyphen-split words joined, times, who, redaction."""

    text: str
    start: float
    end: float
    confidence: float
    speaker: str | None
    channel: str | None
    redacted: str | None = None


def _said(s: Segment) -> list[_Said]:
    if not timed_words(s):  # proportional times, the segment's confidence
        confidence = s.confidence if s.confidence is not None else 1.0
        return [_Said(t.text, t.start, t.end, confidence, s.speaker, s.channel) for t in split(s)]
    out: list[_Said] = []
    pieces = spaced(s)
    for w in s.words or []:
        text = w.text.strip()
        if not text:
            continue
        speaker, channel = w.speaker or s.speaker, w.channel or s.channel
        last = out[-1] if out else None
        glue = last is not None and goes_on(last.text, w.text, pieces=pieces)
        if last is not None and glue and not w.redacted and not last.redacted:
            out[-1] = _Said(
                last.text + text,
                last.start,
                max(last.end, w.end),
                min(last.confidence, w.probability),
                last.speaker,
                last.channel,
            )
        else:
            out.append(_Said(text, w.start, w.end, w.probability, speaker, channel, w.redacted))
    return out


def _labels(item: dict[str, Any], speaker: str | None, channel: str | None) -> dict[str, Any]:
    if speaker:
        item["speaker_label"] = speaker_label(speaker)
    if channel:
        item["channel_label"] = channel_label(channel)
    return item


def aws_json(transcript: Transcript, segments: list[Segment]) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    audio_segments: list[dict[str, Any]] = []
    redacted = False
    for s in segments:
        ids: list[int] = []
        for said in _said(s):
            text = said.text
            if said.redacted:  # the tag is the word; marks after it stay marks
                redacted = True
                word, marks = "[PII]", text[text.rfind("]") + 1 :]
            else:
                word = text.rstrip(PUNCTUATION)
                marks = text[len(word) :]
            if word:
                ids.append(len(items))
                alternative: dict[str, Any] = {
                    "content": word,
                    "confidence": _decimal(said.confidence),
                }
                if said.redacted:
                    category = AWS_CATEGORY.get(said.redacted, "PII")
                    alternative["redactions"] = [
                        {
                            "type": "PII",
                            "category": category,
                            "confidence": alternative["confidence"],
                        }
                    ]
                item = {
                    "id": len(items),
                    "type": "pronunciation",
                    "start_time": _decimal(said.start),
                    "end_time": _decimal(said.end),
                    "alternatives": [alternative],
                }
                if s.language or transcript.language:
                    item["language_code"] = aws_locale(s.language or transcript.language or "")
                items.append(_labels(item, said.speaker, said.channel))
            for mark in marks:
                ids.append(len(items))
                item = {
                    "id": len(items),
                    "type": "punctuation",
                    "alternatives": [{"content": mark, "confidence": "0.0"}],
                }
                items.append(_labels(item, said.speaker, said.channel))
        segment = {
            "id": len(audio_segments),
            "transcript": TAG.sub("[PII]", s.text.strip()),
            "start_time": _decimal(s.start),
            "end_time": _decimal(s.end),
            "items": ids,
        }
        audio_segments.append(_labels(segment, s.speaker, s.channel))
    results: dict[str, Any] = {
        "transcripts": [{"transcript": TAG.sub("[PII]", transcript.text)}],
        "items": items,
        "audio_segments": audio_segments,
    }
    if any(i.get("speaker_label") for i in items):
        results["speaker_labels"] = speaker_turns(items)
    if any(i.get("channel_label") for i in items):
        results["channel_labels"] = channels(items)
    if transcript.language:
        results["language_code"] = aws_locale(transcript.language)
    identified = language_identification(transcript, segments)
    if identified:
        results["language_identification"] = identified
    out: dict[str, Any] = {"jobName": transcript.job, "status": "COMPLETED"}
    if redacted or transcript.redacted:
        out["isRedacted"] = True
    out["results"] = results
    return out


def speaker_turns(items: list[dict[str, Any]]) -> dict[str, Any]:
    """AWS's `speaker_labels`: the turns (runs of one speaker's pronunciations), each with the
    times and speaker of its items, and how many speakers there are."""
    turns: list[dict[str, Any]] = []
    for item in items:
        if item["type"] != "pronunciation" or "speaker_label" not in item:
            continue
        said = {k: item[k] for k in ("start_time", "speaker_label", "end_time")}
        if turns and turns[-1]["speaker_label"] == item["speaker_label"]:
            turns[-1]["end_time"] = item["end_time"]
            turns[-1]["items"].append(said)
        else:
            turns.append({**said, "items": [said]})
    speakers = {t["speaker_label"] for t in turns}
    return {"speakers": len(speakers), "segments": turns}


def channels(items: list[dict[str, Any]]) -> dict[str, Any]:
    """AWS's `channel_labels`: each channel's items, in order."""
    by: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        if "channel_label" in item:
            by.setdefault(item["channel_label"], []).append(item)
    labels = sorted(by, key=lambda c: (len(c), c))
    return {
        "channels": [{"channel_label": c, "items": by[c]} for c in labels],
        "number_of_channels": len(labels),
    }
