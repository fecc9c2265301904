"""What an engine is prompted with: the job's vocabulary and the text of the chunk before. Pure.

Whisper's prompt holds about 220 tokens; each part is cut to about 100 (400 characters by
default): the vocabulary's first phrases (list the most important first), the context's last
whole words. Local Whisper gives the context less room
(`engines.whisper.decode.WHISPER_CONTEXT_CHARACTERS` says why). A context that repeats itself
(compression ratio above `REPETITIVE`, Whisper's test for a decoding stuck in a loop) is left
out: prompting with it would carry the loop into the next chunk.
"""

from __future__ import annotations

import zlib

CONTEXT_CHARACTERS = 400
HOTWORD_CHARACTERS = 400
REPETITIVE = 2.4  # faster-whisper's compression_ratio_threshold


def hotwords(vocabulary: list[str] | None, limit: int = HOTWORD_CHARACTERS) -> str | None:
    """The vocabulary's first phrases that fit `limit` characters, comma-separated."""
    out: list[str] = []
    size = 0
    for phrase in vocabulary or []:
        phrase = " ".join(phrase.split())
        if not phrase:
            continue
        if size + len(phrase) + 2 > limit:
            break
        out.append(phrase)
        size += len(phrase) + 2
    return ", ".join(out) or None


def compression_ratio(text: str) -> float:
    raw = text.encode()
    return len(raw) / len(zlib.compress(raw)) if raw else 0.0


def prompt_of(context: str, limit: int = CONTEXT_CHARACTERS) -> str | None:
    """The last whole words of `context` that fit `limit` characters; None if it repeats itself."""
    text = " ".join(context.split())
    if len(text) > limit:
        text = text[-limit:]
        text = text.split(" ", 1)[1] if " " in text else text
    if compression_ratio(text) > REPETITIVE:
        return None
    return text or None
