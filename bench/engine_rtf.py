"""Real-time factor of the local Whisper engine on synthesized English speech.

Speaks a fixed paragraph with `espeak-ng` (looped until `--seconds` of audio), runs it through
`WhisperEngine.load_media` and `transcribe` for every chunk as a worker would, and prints the
audio seconds, wall seconds, CPU seconds of this process, the real-time factor (audio seconds
per wall second and per CPU second) and the word error rate. The model is loaded before the
clock starts. Needs `espeak-ng` (hack/install-system-deps.sh).

    .venv/bin/python bench/engine_rtf.py --seconds 90 --threads 2
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import wave
from pathlib import Path

import jiwer
import numpy as np

from recall.engines.base import Chunk, Segment
from recall.engines.whisper import WhisperEngine
from recall.models import TranscriptionJob

PARAGRAPH = [
    "The city council met on Tuesday evening to discuss the new budget for public transport.",
    "Most members agreed that more buses should run on weekends and late at night.",
    "Scientists at the university have built a small robot that can walk across sand.",
    "It can also climb over rocks without falling down, even when the ground is wet.",
    "My grandmother likes to bake bread every morning before the sun comes up.",
    "The whole house smells wonderful by breakfast time, and nobody stays in bed.",
    "If the weather stays dry this week, the farmers will start to harvest the wheat.",
    "They will carry it to the market in town and sell it before the end of the month.",
    "The library on the corner is closed for repairs until the beginning of spring.",
    "Children from the school next door planted a garden full of flowers and vegetables.",
]
PAUSE_SECONDS = 0.6


def normalise(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split())


def synthesize(target_seconds: float, out: Path, words_per_minute: int) -> list[str]:
    """Write at least `target_seconds` of speech to `out`; returns the sentences spoken."""
    binary = shutil.which("espeak-ng")
    if binary is None:
        sys.exit("espeak-ng is not installed: run hack/install-system-deps.sh")
    spoken: list[str] = []
    frames: list[bytes] = []
    rate = width = channels = 0
    total = 0.0
    while total < target_seconds:
        sentence = PARAGRAPH[len(spoken) % len(PARAGRAPH)]
        part = out.with_name("part.wav")
        subprocess.run(
            [binary, "-s", str(words_per_minute), "-w", str(part), sentence],
            check=True,
            capture_output=True,
        )
        with wave.open(str(part)) as w:
            channels, width, rate = w.getnchannels(), w.getsampwidth(), w.getframerate()
            frames.append(w.readframes(w.getnframes()))
            total += w.getnframes() / rate
        part.unlink()
        frames.append(b"\0" * int(PAUSE_SECONDS * rate) * channels * width)
        total += PAUSE_SECONDS
        spoken.append(sentence)
    with wave.open(str(out), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(b"".join(frames))
    return spoken


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=90.0, help="audio length to synthesize")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads; 0 = all")
    parser.add_argument("--chunk-seconds", type=int, default=30)
    parser.add_argument("--model", default=None, help="model name or directory; default tiny.en")
    parser.add_argument("--wpm", type=int, default=150, help="espeak-ng words per minute")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    engine = WhisperEngine(model=args.model, threads=args.threads)
    with tempfile.TemporaryDirectory(prefix="recall-bench-") as tmp:
        path = Path(tmp) / "speech.wav"
        spoken = synthesize(args.seconds, path, args.wpm)
        job = TranscriptionJob.from_api(
            {
                "metadata": {"name": "bench"},
                "spec": {
                    "source": {"url": path.as_uri()},
                    "language": "en",
                    "engine": {"chunkSeconds": args.chunk_seconds},
                },
            }
        )
        media = engine.load_media(job)

    cancel = threading.Event()
    warm = Chunk(0, 0.0, 1.0, np.zeros(16_000, np.float32))
    engine.transcribe(warm, language="en", cancel=cancel, job=job, attempt=1)  # load the model

    wall, cpu = time.perf_counter(), time.process_time()
    segments: list[Segment] = []
    for chunk in media.chunks:
        segments += engine.transcribe(chunk, language="en", cancel=cancel, job=job, attempt=1)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu

    wer = jiwer.wer(normalise(" ".join(spoken)), normalise(" ".join(s.text for s in segments)))
    result = {
        "engine": engine.label(),
        "threads": engine.threads,
        "chunk_seconds": args.chunk_seconds,
        "chunks": len(media.chunks),
        "audio_seconds": round(media.duration, 2),
        "wall_seconds": round(wall, 2),
        "cpu_seconds": round(cpu, 2),
        "audio_seconds_per_wall_second": round(media.duration / wall, 2),
        "audio_seconds_per_cpu_second": round(media.duration / cpu, 2),
        "wer": round(wer, 3),
    }
    if args.json:
        print(json.dumps(result))
    else:
        width = max(len(k) for k in result)
        for key, value in result.items():
            print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
