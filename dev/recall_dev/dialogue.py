"""Dialogues with known turns: several espeak-ng voices (variants, pitches, speeds) taking
turns, for the speaker-labelling tests and benchmarks.

    d = dialogue.make(out, speakers=3, turns=12, seed=7)
    d.turns[0]    # Turn(speaker=0, start=0.5, end=4.1, text="...")

Each turn is one espeak-ng utterance of consecutive words from the project's sentences, as
long as asked (`low`..`high` seconds, drawn per turn), its leading and trailing silence cut;
a gap of 0.2-0.8 s follows it, or with probability `overlap` the next turn starts 0.5-1.5 s
before it ends (the two mixed, each at its own level). A turn's reference span is its first
to its last sound
(pauses between its words are inside it, as a human annotator marks a turn). Same arguments,
same file and turns (espeak-ng of one version; the draws are seeded).
"""

from __future__ import annotations

import io
import itertools
import random
import subprocess
import wave
from dataclasses import dataclass
from math import gcd
from pathlib import Path

import numpy as np
import numpy.typing as npt
from scipy.signal import resample_poly

from recall_dev.speech import SENTENCES, espeak
from recall_dev.timed_speech import PASSAGE

RATE = 16_000
SILENCE = 0.01  # of full scale: quieter samples at an utterance's ends are cut


@dataclass(frozen=True)
class Voice:
    """An espeak-ng speaker: a voice with its variant, a pitch (0-99) and a speed (wpm)."""

    name: str
    pitch: int
    speed: int


# Voices of both sexes, accents, pitches and speeds: the six of espeak-ng's English variants
# whose speaker vectors lie furthest apart (each at least 0.15 in cosine distance from the
# others' centre).
VOICES = (
    Voice("en-us+m1", 30, 160),
    Voice("en-us+f4", 95, 170),
    Voice("en-gb-scotland+m7", 65, 145),
    Voice("en+klatt", 45, 150),
    Voice("en+f1", 50, 185),
    Voice("en+f2", 65, 160),
)


@dataclass(frozen=True)
class Turn:
    speaker: int  # index into the dialogue's voices
    start: float
    end: float
    text: str


@dataclass(frozen=True)
class Dialogue:
    path: Path
    voices: tuple[Voice, ...]
    turns: tuple[Turn, ...]
    duration: float

    @property
    def overlap_seconds(self) -> float:
        """Seconds where two turns sound at once."""
        spans = sorted((t.start, t.end) for t in self.turns)
        total = 0.0
        for (_, e1), (s2, e2) in itertools.pairwise(spans):
            total += max(0.0, min(e1, e2) - s2)
        return total


def _words() -> list[str]:
    return " ".join([*SENTENCES, PASSAGE]).replace(",", "").replace(".", "").split()


def utterance(text: str, voice: Voice) -> npt.NDArray[np.float32]:
    """`text` spoken by `voice`, 16 kHz mono float32, its leading and trailing silence cut."""
    run = subprocess.run(
        [
            espeak(),
            "-v",
            voice.name,
            "-p",
            str(voice.pitch),
            "-s",
            str(voice.speed),
            "--stdout",
            text,
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    with wave.open(io.BytesIO(run.stdout)) as w:
        rate = w.getframerate()
        pcm16 = np.frombuffer(w.readframes(w.getnframes()), "<i2")
    g = gcd(RATE, rate)
    pcm = np.asarray(resample_poly(pcm16 / 32768, RATE // g, rate // g), np.float32)
    loud = np.flatnonzero(np.abs(pcm) > SILENCE)
    return pcm[loud[0] : loud[-1] + 1] if len(loud) else pcm[:0]


def make(
    out: Path,
    *,
    speakers: int,
    turns: int,
    seed: int = 0,
    low: float = 1.0,
    high: float = 20.0,
    overlap: float = 0.0,
    voices: tuple[Voice, ...] | None = None,
) -> Dialogue:
    """A dialogue of `turns` turns among `speakers` voices into the mono WAV `out`."""
    pick = random.Random(seed)
    chosen = voices or tuple(pick.sample(VOICES, speakers))
    words = _words()
    pieces: list[tuple[int, npt.NDArray[np.float32]]] = []
    made: list[Turn] = []
    at = round(0.5 * RATE)
    previous = -1
    for k in range(turns):
        who = (
            k % speakers
            if k < speakers
            else pick.choice([s for s in range(speakers) if s != previous])
        )
        voice = chosen[who]
        seconds = pick.uniform(low, high)
        count = max(1, round(seconds * voice.speed / 60))
        first = pick.randrange(len(words))
        text = " ".join(words[(first + i) % len(words)] for i in range(count))
        audio = utterance(text, voice)
        if made and overlap and pick.random() < overlap:  # before the previous turn ends
            at = round((made[-1].end - pick.uniform(0.5, 1.5)) * RATE)
            at = max(at, round(made[-1].start * RATE) + 1)
        pieces.append((at, audio))
        made.append(Turn(who, at / RATE, (at + len(audio)) / RATE, text))
        at += len(audio) + round(pick.uniform(0.2, 0.8) * RATE)
        previous = who
    total = max(a + len(p) for a, p in pieces) + round(0.5 * RATE)
    mix = np.zeros(total, np.float32)
    for a, p in pieces:
        mix[a : a + len(p)] += p
    with wave.open(str(out), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes((np.clip(mix, -1, 1) * 32767).astype("<i2").tobytes())
    return Dialogue(out, chosen, tuple(made), total / RATE)
