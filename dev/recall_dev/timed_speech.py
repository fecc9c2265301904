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
import re
import subprocess
import threading
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import jiwer
import numpy as np

from recall.engines.base import TranscribeRequest
from recall.media.types import Segment
from recall.resources import TranscriptionJob
from recall_dev.speech import espeak, normalise

if TYPE_CHECKING:
    from recall.engines.whisper import WhisperEngine

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


# --- measuring -----------------------------------------------------------------------------


def errors_of(truth: list[TimedWord], segments: list[Segment]) -> list[float]:
    """Start errors (seconds) of the words the model wrote as they were said: the words a
    word error rate's alignment (jiwer's, the fewest edits) counts as right."""
    words = [w for s in segments for w in s.words or []]
    heard = [normalise(w.text) or "-" for w in words]
    said = [t.text for t in truth]
    out = []
    aligned = jiwer.process_words(" ".join(said), " ".join(heard))
    for chunk in aligned.alignments[0]:
        if chunk.type == "equal":
            for k in range(chunk.ref_end_idx - chunk.ref_start_idx):
                hyp, ref = chunk.hyp_start_idx + k, chunk.ref_start_idx + k
                out.append(words[hyp].start - truth[ref].start)
    return out


def transcribed_with_a_resume(engine: WhisperEngine, path: Path) -> list[Segment]:
    """`path` as two attempts would transcribe it: its first chunk, then the rest from a
    resume (a new media seeking to the checkpointed cut) with the first chunk's text as the
    context; segments with absolute times."""
    job = TranscriptionJob.from_api(
        {
            "metadata": {"name": "timed"},
            "spec": {
                "source": {"url": path.as_uri()},
                "language": "en",
                "transcript": {"words": True},
            },
        }
    )
    cancel = threading.Event()
    segments: list[Segment] = []
    with engine.load_media(job) as media:
        first = next(media.chunks())
        segments += [
            s.shifted(first.start)
            for s in engine.transcribe(
                TranscribeRequest.of(first, language="en", cancel=cancel, job=job, attempt=1)
            )
        ]
    with engine.load_media(job) as media:
        rest = list(media.chunks(first.resume()))
    assert len(rest) >= 1 and rest[0].first == first.end
    context = " ".join(s.text for s in segments)
    for chunk in rest:
        found = engine.transcribe(
            TranscribeRequest.of(
                chunk, language="en", cancel=cancel, job=job, attempt=2, context=context
            )
        )
        segments += [s.shifted(chunk.start) for s in found]
        context = " ".join(s.text for s in found) or context
    assert any(w.start > rest[0].start for s in segments for w in s.words or [])  # absolute
    return segments


# --- invented names, for the vocabulary ------------------------------------------------------

NAMES = ["Zarvethia", "Quonbril", "Tesmarine", "Oberlatz", "Vintrosk", "Kelumbra"]
NAME_SENTENCES = [
    "Yesterday Zarvethia flew to Quonbril to meet the mayor.",
    "The engineers from Tesmarine built a bridge near Oberlatz.",
    "Vintrosk and Kelumbra signed the agreement on Friday.",
    "Everyone in Quonbril remembers the storm that hit Tesmarine.",
    "Kelumbra sent a letter to Zarvethia about the harvest in Oberlatz.",
    "The train from Vintrosk arrives at noon.",
]


def name_errors(text: str) -> float:
    """The share of the invented names said that the text does not have, spelled right."""
    said = sum(s.count(n) for s in NAME_SENTENCES for n in NAMES)
    written = sum(len(re.findall(rf"\b{n}\b", text)) for n in NAMES)
    return 1 - min(written, said) / said
