"""The OpenAI-compatible server's answers read (pure): an error's message, and a
`verbose_json` transcription's segments and words (`recall.engines.openai` states the
contract)."""

from __future__ import annotations

import json
import math
from typing import Any

from recall.media.types import Segment, Word


def error_message(body: bytes, fallback: str) -> str:
    """The server's explanation from an error body (OpenAI, FastAPI or plain), one line."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data: Any = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        for key in ("error", "message", "detail"):
            value = data.get(key)
            if isinstance(value, dict):
                value = value.get("message")
            if isinstance(value, str) and value.strip():
                text = value
                break
    flat = " ".join(text.split()) or fallback
    return flat if len(flat) <= 300 else flat[:299] + "…"


def parse_segments(data: Any, duration: float, *, words: bool = False) -> list[Segment]:
    """Segments of a `verbose_json` transcription (`recall.engines.openai`'s contract); with
    `words`, each of the response's words in the segment its middle falls in (or the nearest),
    carrying the segment's confidence as its probability (the API gives words none)."""
    if not isinstance(data, dict):
        raise ValueError("the response is not a JSON object")
    segments: list[Segment] = []
    for item in data.get("segments") or []:
        text = str(item.get("text", "")).strip() if isinstance(item, dict) else ""
        if not text:
            continue
        start = min(max(float(item.get("start", 0.0)), 0.0), duration)
        end = min(max(float(item.get("end", duration)), start), duration)
        logprob = item.get("avg_logprob")
        confidence = round(min(1.0, math.exp(float(logprob))), 4) if logprob is not None else None
        segments.append(Segment(start=start, end=end, text=text, confidence=confidence))
    if not segments and not data.get("segments"):
        text = str(data.get("text") or "").strip()
        segments = [Segment(start=0.0, end=duration, text=text)] if text else []
    if words:
        segments = _with_words(segments, data.get("words") or [], duration)
    return segments


def _with_words(segments: list[Segment], raw: list[Any], duration: float) -> list[Segment]:
    found: list[list[Word]] = [[] for _ in segments]
    for item in raw:
        if not isinstance(item, dict) or not str(item.get("word", "")).strip() or not segments:
            continue
        start = min(max(float(item.get("start", 0.0)), 0.0), duration)
        end = min(max(float(item.get("end", start)), start), duration)
        middle = (start + end) / 2
        k = min(
            range(len(segments)),
            key=lambda i: max(segments[i].start - middle, 0.0, middle - segments[i].end),
        )
        s = segments[k]
        text = " " + str(item["word"]).strip()
        probability = s.confidence if s.confidence is not None else 1.0
        found[k].append(
            Word(
                start=max(start, s.start),
                end=min(max(end, start), s.end),
                text=text,
                probability=probability,
            )
        )
    out = []
    for s, ws in zip(segments, found, strict=True):
        floor = s.start
        tidy = []
        for w in sorted(ws, key=lambda w: w.start):
            w = w.model_copy(
                update={"start": max(w.start, floor), "end": max(w.end, w.start, floor)}
            )
            tidy.append(w)
            floor = w.end
        out.append(s.model_copy(update={"words": punctuated(tidy, s.text) or None}))
    return out


LOOKAHEAD = 3  # tokens of the text a word may skip to find itself (a dash, a word it lacks)


def _bare(text: str) -> str:
    return "".join(c for c in text.casefold() if c.isalnum())


def punctuated(words: list[Word], text: str) -> list[Word]:
    """`words` written as `text` writes them: each, in order, takes the next token of `text`
    (split at spaces) within `LOOKAHEAD` that is the same word but for case and punctuation
    ("hello" → "Hello,"); a word without one keeps its own text. Pure."""
    tokens = text.split()
    at = 0
    out = []
    for w in words:
        bare = _bare(w.text)
        match = next(
            (
                k
                for k in range(at, min(at + LOOKAHEAD, len(tokens)))
                if bare and _bare(tokens[k]) == bare
            ),
            None,
        )
        if match is not None:
            w = w.model_copy(update={"text": " " + tokens[match]})
            at = match + 1
        out.append(w)
    return out


def has_text(data: dict[str, Any]) -> bool:
    """Whether a `verbose_json` answer holds any text."""
    segments = data.get("segments") or []
    return bool(str(data.get("text") or "").strip()) or any(
        isinstance(s, dict) and str(s.get("text") or "").strip() for s in segments
    )
