"""Speech whose every word's start is known: words synthesized one by one with espeak-ng and
joined with known silences (the word timing tests and benchmarks).

    words = timed_speech.speak(["the", "council", "met"], out, gaps=[0.3, 0.5])
    words[1].start   # where "council" begins in out (seconds), to the sample

Each word is spoken on its own, its leading and trailing silence cut (samples below
`SILENCE` of full scale), and the words are joined with the given gaps of digital silence
after `lead` seconds of it. A word's start is where its first sound is, so an aligner that
finds the onset of the word is right to within the rise of its first phoneme.
"""

from __future__ import annotations

import random
import subprocess
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from recall_dev.speech import espeak

SILENCE = 0.01  # of full scale: quieter samples at a word's ends are cut

PASSAGE = (
    "the council met on tuesday evening to discuss the budget for public transport and most "
    "members agreed that more buses should run on weekends while others asked about the cost "
    "of repairs to roads and bridges near the river the library opens at nine and closes at "
    "six except on sundays when it stays closed all day after the long meeting the engineers "
    "went outside for a walk and talked about the next version of the machine"
)


@dataclass(frozen=True)
class TimedWord:
    text: str
    start: float
    end: float


def _spoken(word: str, workdir: Path, words_per_minute: int) -> tuple[np.ndarray, int]:
    path = workdir / "word.wav"
    subprocess.run(
        [espeak(), "-s", str(words_per_minute), "-w", str(path), word],
        check=True,
        capture_output=True,
        timeout=60,
    )
    with wave.open(str(path)) as w:
        rate = w.getframerate()
        pcm = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768
    path.unlink()
    loud = np.flatnonzero(np.abs(pcm) > SILENCE)
    if len(loud) == 0:
        raise ValueError(f"espeak-ng said nothing for {word!r}")
    return pcm[loud[0] : loud[-1] + 1], rate


def speak(
    words: list[str],
    out: Path,
    *,
    gaps: list[float] | None = None,
    lead: float = 0.5,
    words_per_minute: int = 150,
) -> list[TimedWord]:
    """`words` spoken one by one into the mono WAV `out`, `gaps[i]` seconds of silence after
    word i (0.25 s each without `gaps`); each word's true start and end."""
    pieces: list[np.ndarray] = []
    truth: list[TimedWord] = []
    rate = 0
    at = 0
    for i, word in enumerate(words):
        pcm, rate = _spoken(word, out.parent, words_per_minute)
        if i == 0:
            pieces.append(np.zeros(round(lead * rate), np.float32))
            at = len(pieces[0])
        truth.append(TimedWord(word, at / rate, (at + len(pcm)) / rate))
        pieces.append(pcm)
        at += len(pcm)
        gap = gaps[i] if gaps is not None and i < len(gaps) else 0.25
        silence = np.zeros(round(gap * rate), np.float32)
        pieces.append(silence)
        at += len(silence)
    samples = np.concatenate(pieces)
    with wave.open(str(out), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
    return truth


def passage(seed: int = 0, low: float = 0.12, high: float = 0.6) -> tuple[list[str], list[float]]:
    """The passage's words and random gaps between them (seconds in [low, high])."""
    words = PASSAGE.split()
    pick = random.Random(seed)
    return words, [round(pick.uniform(low, high), 3) for _ in words]
