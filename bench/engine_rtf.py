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
import tempfile
import threading
import time
from pathlib import Path

import jiwer
import numpy as np

from recall.engines.base import TranscribeRequest
from recall.engines.whisper import WhisperEngine
from recall.media.types import Chunk, Segment
from recall.resources import TranscriptionJob
from recall_dev import speech


def measure(
    seconds: float,
    *,
    threads: int = 0,
    chunk_seconds: int = 30,
    model: str | None = None,
    wpm: int = 150,
) -> dict[str, object]:
    """Transcribe `seconds` of synthesized speech; the real-time factor and the word error rate."""
    engine = WhisperEngine(model=model, threads=threads)
    with tempfile.TemporaryDirectory(prefix="recall-bench-") as tmp:
        path = Path(tmp) / "speech.wav"
        spoken = speech.speak_for(seconds, path, words_per_minute=wpm)
        job = TranscriptionJob.from_api(
            {
                "metadata": {"name": "bench"},
                "spec": {
                    "source": {"url": path.as_uri()},
                    "language": "en",
                    "engine": {"chunkSeconds": chunk_seconds},
                },
            }
        )
        with engine.load_media(job) as media:
            chunks = list(media.chunks())  # decoded here: the clock measures the model only

    cancel = threading.Event()
    warm = Chunk(0, 0.0, 1.0, np.zeros(16_000, np.float32))
    engine.transcribe(
        TranscribeRequest.of(warm, language="en", cancel=cancel, job=job, attempt=1)
    )  # load the model

    wall, cpu = time.perf_counter(), time.process_time()
    segments: list[Segment] = []
    for chunk in chunks:
        segments += engine.transcribe(
            TranscribeRequest.of(chunk, language="en", cancel=cancel, job=job, attempt=1)
        )
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu

    hypothesis = speech.normalise(" ".join(s.text for s in segments))
    wer = jiwer.wer(speech.normalise(" ".join(spoken)), hypothesis)
    return {
        "engine": engine.label(),
        "threads": engine.threads,
        "chunk_seconds": chunk_seconds,
        "chunks": len(chunks),
        "audio_seconds": round(media.duration, 2),
        "wall_seconds": round(wall, 2),
        "cpu_seconds": round(cpu, 2),
        "audio_seconds_per_wall_second": round(media.duration / wall, 2),
        "audio_seconds_per_cpu_second": round(media.duration / cpu, 2),
        "wer": round(wer, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=90.0, help="audio length to synthesize")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads; 0 = all")
    parser.add_argument("--chunk-seconds", type=int, default=30)
    parser.add_argument("--model", default=None, help="model name or directory; default tiny.en")
    parser.add_argument("--wpm", type=int, default=150, help="espeak-ng words per minute")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    result = measure(
        args.seconds,
        threads=args.threads,
        chunk_seconds=args.chunk_seconds,
        model=args.model,
        wpm=args.wpm,
    )
    if args.json:
        print(json.dumps(result))
    else:
        width = max(len(k) for k in result)
        for key, value in result.items():
            print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
