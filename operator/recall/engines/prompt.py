"""What an engine is prompted with: the job's vocabulary and the text of the chunk before. Pure.

Whisper's prompt holds about 220 tokens; both parts are cut to about 100 tokens each (400
characters): the vocabulary's first phrases (so list the most important first), the context's
last whole words (what was said just before the chunk).
"""

from __future__ import annotations

CONTEXT_CHARACTERS = 400
HOTWORD_CHARACTERS = 400


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


def prompt_of(context: str, limit: int = CONTEXT_CHARACTERS) -> str | None:
    """The last whole words of `context` that fit `limit` characters."""
    text = " ".join(context.split())
    if len(text) > limit:
        text = text[-limit:]
        text = text.split(" ", 1)[1] if " " in text else text
    return text or None
