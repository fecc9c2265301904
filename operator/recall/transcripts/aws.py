"""The aws.json output: a transcript in the layout of AWS Transcribe's output, so that tools
reading AWS's output read it. Pure.

Fields, ids and types as AWS writes them (times and confidences as decimal strings). A word's
trailing punctuation is an item of its own; a word Whisper split at a hyphen is one item; a
segment without word timings is split into its text's words, timed in proportion, with the
segment's confidence.

Languages (docs/languages.md): every pronunciation has its `language_code`, and
`results.language_identification` the detected language's probability, or under segment scope
each language's share of the speech, in AWS's locales (`aws_locale`). Items and audio segments
carry `speaker_label` (`spk_0` for S1) and `channel_label` (`ch_0`); in a file split by channel
the items are in order of their start. Redacted spans are written as AWS's content redaction
writes them: `[PII]` with a `redactions` entry naming the category, and `isRedacted` true.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from recall.media.types import Segment
from recall.transcripts.records import Transcript
from recall.transcripts.words import goes_on, spaced, split, timed_words

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

# AWS Transcribe's `language_code` for a language; any other is written as its ISO 639-1 code.
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
        glue = (
            last is not None
            and (last.speaker, last.channel) == (speaker, channel)
            and goes_on(last.text, w.text, pieces=pieces)
        )
        if last is not None and glue and not w.redacted and not last.redacted:
            out[-1] = replace(
                last,
                text=last.text + text,
                end=max(last.end, w.end),
                confidence=min(last.confidence, w.probability),
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
        first = len(items)
        for said in _said(s):
            redacted = redacted or bool(said.redacted)
            items += _items(said, len(items), s.language or transcript.language)
        segment = {
            "id": len(audio_segments),
            "transcript": TAG.sub("[PII]", s.text.strip()),
            "start_time": _decimal(s.start),
            "end_time": _decimal(s.end),
            "items": list(range(first, len(items))),
        }
        audio_segments.append(_labels(segment, s.speaker, s.channel))
    if len({s.channel for s in segments}) > 1:  # channels speak at once: items in time order
        items, audio_segments = in_time_order(items, audio_segments)
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


def in_time_order(
    items: list[dict[str, Any]], audio_segments: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`items` by their start, numbered again, and `audio_segments` naming them by their new
    ids: a punctuation item stays after the word before it in its segment, and a segment's
    marks before its first word stay at the segment's start."""
    groups: list[tuple[float, list[dict[str, Any]]]] = []
    for segment in audio_segments:
        at = float(segment["start_time"])
        for j, i in enumerate(segment["items"]):
            item = items[i]
            if "start_time" in item:
                at = float(item["start_time"])
                groups.append((at, [item]))
            elif j:
                groups[-1][1].append(item)  # a mark after the word before it
            else:
                groups.append((at, [item]))  # marks before the segment's first word
    groups.sort(key=lambda g: g[0])  # stable: a segment's order kept at equal starts
    ordered = [item for _, g in groups for item in g]
    moved = {item["id"]: new for new, item in enumerate(ordered)}
    for new, item in enumerate(ordered):
        item["id"] = new
    for segment in audio_segments:
        segment["items"] = sorted(moved[i] for i in segment["items"])
    return ordered, audio_segments


def _items(said: _Said, first: int, language: str | None) -> list[dict[str, Any]]:
    """The items of one word, numbered from `first`: its pronunciation (none for a word of
    marks alone), then a punctuation item per mark after it."""
    text = said.text
    if said.redacted:  # the tag is the word; marks after it stay marks
        word, marks = "[PII]", text[text.rfind("]") + 1 :]
    else:
        word = text.rstrip(PUNCTUATION)
        marks = text[len(word) :]
    out = [_pronunciation(said, word, first, language)] if word else []
    for mark in marks:
        item = {
            "id": first + len(out),
            "type": "punctuation",
            "alternatives": [{"content": mark, "confidence": "0.0"}],
        }
        out.append(_labels(item, said.speaker, said.channel))
    return out


def _pronunciation(said: _Said, word: str, id: int, language: str | None) -> dict[str, Any]:
    alternative: dict[str, Any] = {"content": word, "confidence": _decimal(said.confidence)}
    if said.redacted:
        category = AWS_CATEGORY.get(said.redacted, "PII")
        alternative["redactions"] = [
            {"type": "PII", "category": category, "confidence": alternative["confidence"]}
        ]
    item = {
        "id": id,
        "type": "pronunciation",
        "start_time": _decimal(said.start),
        "end_time": _decimal(said.end),
        "alternatives": [alternative],
    }
    if language:
        item["language_code"] = aws_locale(language)
    return _labels(item, said.speaker, said.channel)


def speaker_turns(items: list[dict[str, Any]]) -> dict[str, Any]:
    """AWS's `speaker_labels`: the turns (runs of one speaker's pronunciations), and how many
    speakers there are."""
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
