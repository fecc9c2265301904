"""Batched inference against one chunk at a time: the real Whisper engine on this CPU.

    .venv/bin/python -m bench.batching                 # ~5 minutes on two shared cores
    .venv/bin/python -m bench.run --only batching      # the same, into docs/benchmarks.md

The same real recording (Debian's LibriVox clips of Sense and Sensibility,
`recall_dev.librivox`, `repeat` times over, cut into the default 30 s chunks), the same model
(the bundled tiny.en), threads (every CPU here), beam 2, English, word timings asked for
(`spec.transcript.words`), through `WhisperEngine` as the worker's attempt calls it:

- `one`: `transcribe`, one chunk a call (a worker's `batchSize` 1, the default), and `one_nowords`
  the same without word timings asked for. Since 2026-12-02 `transcribe` is a batch of one
  chunk: its windows of speech through faster-whisper's `BatchedInferencePipeline`, each
  decoded once, words aligned whether asked for or not (segments are cut at them); before, it
  was faster-whisper's one-at-a-time decoding, which decoded each chunk's last sentence again
  in a second window and aligned words only when asked;
- `batched_1`, `batched_4`, `batched_8`: `transcribe_batch` with `batch_size` chunks a call
  (1 now decodes as `one` does: the rows differ only by the machine's noise).

The chunks are decoded and the model loaded before the clock starts; each kind runs `rounds`
times, interleaved, and the fastest wall and CPU seconds count (the machine is shared: other
work only adds). CPU seconds are the process's (every thread of CTranslate2). `wer` is against
the LibriVox transcription; `changed` is the share of words that differ from `one`.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from recall.engines.base import TranscribeRequest

KINDS: list[tuple[str, int, bool]] = [  # (name, batch size: 0 = transcribe, words)
    ("one", 0, True),
    ("one_nowords", 0, False),
    ("batched_1", 1, True),
    ("batched_4", 4, True),
    ("batched_8", 8, True),
]


def run_kind(chunks: list[Any], job: Any, batch: int) -> tuple[float, float, str]:
    """Wall and CPU seconds of transcribing `chunks` one way, and the text."""
    from recall.engines.whisper import WhisperEngine

    engine = WhisperEngine(batch_size=max(1, batch))
    cancel = threading.Event()
    texts: list[str] = []
    wall, cpu = time.perf_counter(), time.process_time()
    if batch == 0:
        for chunk in chunks:
            found = engine.transcribe(
                TranscribeRequest.of(chunk, language="en", cancel=cancel, job=job, attempt=1)
            )
            texts += [s.text for s in found]
    else:
        for i in range(0, len(chunks), batch):
            group = chunks[i : i + batch]
            results = engine.transcribe_batch(
                TranscribeRequest.of(group, language="en", cancel=cancel, job=job, attempt=1)
            )
            texts += [s.text for segments in results for s in segments]
    return time.perf_counter() - wall, time.process_time() - cpu, " ".join(texts)


def measure(repeat: int = 8, rounds: int = 2) -> dict[str, Any]:
    """The figures of the module docstring."""
    import jiwer

    from recall.engines.whisper import WhisperEngine
    from recall.resources import TranscriptionJob
    from recall_dev import librivox, speech

    norm = speech.normalise
    with tempfile.TemporaryDirectory(prefix="recall-batching-") as tmp:
        path = Path(tmp) / "librivox.wav"
        seconds, said = librivox.recording(path, repeat=repeat)
        jobs = {
            words: TranscriptionJob.from_api(
                {
                    "metadata": {"name": "librivox"},
                    "spec": {
                        "source": {"url": path.as_uri()},
                        "language": "en",
                        "transcript": {"words": words},
                    },
                }
            )
            for words in (True, False)
        }
        engine = WhisperEngine()
        with engine.load_media(jobs[True]) as media:
            chunks = list(media.chunks())
    engine.transcribe(
        TranscribeRequest.of(
            chunks[0], language="en", cancel=threading.Event(), job=jobs[True], attempt=1
        )
    )
    runs: dict[str, list[tuple[float, float, str]]] = {name: [] for name, _, _ in KINDS}
    for _ in range(rounds):  # interleaved, so a busy spell of the machine hits all of them
        for name, batch, words in KINDS:
            runs[name].append(run_kind(chunks, jobs[words], batch))
    out: dict[str, Any] = {
        "audio_seconds": round(seconds, 1),
        "chunks": len(chunks),
        "chunk_seconds": 30,
        "threads": engine.threads,
        "rounds": rounds,
        "device": "/".join(engine.device_of(jobs[True]) or ("?", "?")),
    }
    reference = runs["one"][0][2]
    for name, _batch, _words in KINDS:
        wall = min(r[0] for r in runs[name])
        cpu = min(r[1] for r in runs[name])
        text = runs[name][0][2]
        out[name] = {
            "wall_seconds": round(wall, 2),
            "cpu_seconds": round(cpu, 2),
            "audio_per_wall_second": round(seconds / wall, 1),
            "audio_per_cpu_second": round(seconds / cpu, 1),
            "wer": round(jiwer.wer(norm(said), norm(text)), 3),
            "changed": round(jiwer.wer(norm(reference), norm(text)), 3),
        }
    return out


LABELS = {
    "one": ("one chunk a call (`transcribe`)", "1"),
    "one_nowords": ("one chunk a call, words not asked for", "1"),
    "batched_1": ("batched pipeline", "1"),
    "batched_4": ("batched pipeline", "4"),
    "batched_8": ("batched pipeline", "8"),
}


def markdown(section: dict[str, Any]) -> list[str]:
    """The batching section of docs/benchmarks.md."""
    from bench.report import _table

    lines = [
        "## Batched inference",
        "",
        f"The real Whisper engine (bundled tiny.en, {section['device']}, {section['threads']} "
        f"threads, beam 2) on {section['audio_seconds']} s of LibriVox read speech in "
        f"{section['chunks']} chunks of {section['chunk_seconds']} s, word timings asked for; "
        "one chunk a call (a batch of one chunk) against faster-whisper's batched pipeline with "
        f"1, 4 and 8 chunks a call (a worker's `batchSize`). Fastest of {section['rounds']} "
        "interleaved rounds; CPU seconds are the process's. *changed*: the share of words that "
        "differ from one chunk a call. `bench/batching.py` says what each row runs.",
        "",
    ]
    rows = []
    for name, (label, size) in LABELS.items():
        r = section.get(name)
        if not r:
            continue
        rows.append(
            [
                label,
                size,
                r["audio_per_cpu_second"],
                r["audio_per_wall_second"],
                r["cpu_seconds"],
                r["wer"],
                r["changed"],
            ]
        )
    lines += _table(
        [
            "engine call",
            "chunks a call",
            "audio s per CPU s",
            "audio s per wall s",
            "CPU s",
            "WER",
            "changed",
        ],
        rows,
    )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=8, help="the LibriVox clips, times over")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    result = measure(args.repeat, args.rounds)
    for line in markdown(result):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
