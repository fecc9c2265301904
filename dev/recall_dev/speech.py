"""Synthesized speech for the demo, the tests and the benchmarks (espeak-ng).

`synthesize(sentences, out)` speaks each sentence with espeak-ng and joins them, with a
pause after each, into one mono WAV. espeak-ng is a Debian package
(`hack/install-system-deps.sh` installs it); without it `SpeechUnavailable` says so.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import wave
from pathlib import Path

SENTENCES = [
    "The city council met on Tuesday evening to discuss the new budget for public transport, "
    "and most members agreed that more buses should run on weekends.",
    "Scientists at the university have built a small robot that can walk across sand and "
    "climb over rocks without falling down.",
    "My grandmother likes to bake bread every morning before the sun comes up, and the whole "
    "house smells wonderful by breakfast time.",
    "If the weather stays dry this week, the farmers will start to harvest the wheat and carry "
    "it to the market in town.",
    "The library downstairs opens at nine and closes at six, except on Sundays when it stays "
    "closed all day.",
    "After the long meeting, the engineers went outside for a walk and talked about the "
    "next version of the machine.",
]


class SpeechUnavailable(RuntimeError):
    """espeak-ng is not installed."""


def espeak() -> str:
    path = shutil.which("espeak-ng")
    if path is None:
        raise SpeechUnavailable(
            "espeak-ng is not installed; it synthesizes the speech to transcribe. "
            "Run the project's system-deps install: hack/install-system-deps.sh"
        )
    return path


def normalise(text: str) -> str:
    """Lower case, punctuation removed, single spaces: the form word error rates compare."""
    return " ".join(re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split())


def synthesize(
    sentences: list[str], out: Path, *, words_per_minute: int = 140, pause_seconds: float = 1.0
) -> float:
    """Speak `sentences` into one mono WAV at `out`, a pause after each; returns its seconds."""
    binary = espeak()
    pieces: list[bytes] = []
    params: tuple[int, int, int] | None = None
    for i, sentence in enumerate(sentences):
        part = out.with_name(f"{out.stem}-{i}.wav")
        subprocess.run(
            [binary, "-s", str(words_per_minute), "-w", str(part), sentence],
            check=True,
            capture_output=True,
            timeout=60,
        )
        with wave.open(str(part)) as w:
            params = (w.getnchannels(), w.getsampwidth(), w.getframerate())
            pieces.append(w.readframes(w.getnframes()))
        part.unlink()
        channels, width, rate = params
        pieces.append(b"\0" * int(pause_seconds * rate) * channels * width)
    if params is None:
        raise ValueError("no sentences to speak")
    channels, width, rate = params
    with wave.open(str(out), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(b"".join(pieces))
    return sum(len(p) for p in pieces) / (rate * channels * width)


def synthesize_voices(
    sentences: list[tuple[str, str]],
    out: Path,
    *,
    words_per_minute: int = 140,
    pause_seconds: float = 1.0,
) -> list[tuple[float, float]]:
    """Speak each (espeak-ng voice, sentence) into one mono WAV at `out` (16 kHz), a pause
    after each; returns each sentence's (start, end) in seconds: speech in several languages
    with known text and known times."""
    binary = espeak()
    rate = 16_000
    pieces: list[bytes] = []
    spans: list[tuple[float, float]] = []
    at = 0
    for i, (voice, sentence) in enumerate(sentences):
        part = out.with_name(f"{out.stem}-{i}.wav")
        subprocess.run(
            [binary, "-v", voice, "-s", str(words_per_minute), "-w", str(part), sentence],
            check=True,
            capture_output=True,
            timeout=60,
        )
        with wave.open(str(part)) as w:
            frames = w.readframes(w.getnframes())
            width, source_rate = w.getsampwidth(), w.getframerate()
        part.unlink()
        samples = _resampled(frames, width, source_rate, rate)
        spans.append((at / rate, (at + len(samples) // 2) / rate))
        pieces += [samples, b"\0" * int(pause_seconds * rate) * 2]
        at += len(samples) // 2 + int(pause_seconds * rate)
    with wave.open(str(out), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"".join(pieces))
    return spans


def _resampled(frames: bytes, width: int, source: int, rate: int) -> bytes:
    """16-bit mono `frames` at `source` Hz as 16-bit at `rate` Hz (linear interpolation)."""
    import numpy as np

    assert width == 2, "espeak-ng writes 16-bit samples"
    x = np.frombuffer(frames, dtype="<i2").astype(np.float32)
    if source == rate or len(x) == 0:
        return x.astype("<i2").tobytes()
    n = int(len(x) * rate / source)
    y = np.interp(np.arange(n) * source / rate, np.arange(len(x)), x)
    return np.clip(y, -32768, 32767).astype("<i2").tobytes()


def speak_for(seconds: float, out: Path, *, words_per_minute: int = 150) -> list[str]:
    """At least `seconds` of speech at `out`, cycling through SENTENCES; returns what was said."""
    per_sentence = 10.0  # a first guess; corrected after one try
    count = max(1, int(seconds / per_sentence) + 1)
    while True:
        spoken = [SENTENCES[i % len(SENTENCES)] for i in range(count)]
        total = synthesize(spoken, out, words_per_minute=words_per_minute, pause_seconds=0.6)
        if total >= seconds:
            return spoken
        count = int(count * seconds / total) + 1
