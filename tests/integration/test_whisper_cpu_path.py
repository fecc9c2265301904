"""The engine path's words and times stay those of the reference: LibriVox read speech
(`recall_dev.librivox`, the clips three times over: three chunks) through the worker's path
(the engine opens, decodes and cuts the media; `transcribe_batch` of two chunks a call, the
text before as context; words asked for) on the CPU, int8, two threads, the bundled tiny.en.

The path runs in a process of its own with its kernels pinned (`PINNED`): CTranslate2's AVX2
code and OpenBLAS's Haswell kernels, on one BLAS thread. Unpinned, the same code writes other
words on another CPU: on a machine with AVX-512 the path from before the CPU cuts wrote a comma
("woman,") the reference machine's did not, and moved words by 20 ms. Pinned, the path from
before the cuts (d0eb7c8^) and the path now write the same words at the same times to the
millisecond; `data/whisper_cpu_path.json` is that path's, pinned. `python -m
tests.integration.test_whisper_cpu_path --write` writes it again (pinned itself). Every change
to the speech detection, the features, the windows or the word alignment must keep the same
words, each word's times within 10 ms."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from recall.engines.base import TranscribeRequest
from recall.engines.whisper import WhisperEngine
from recall.media.types import text_of
from recall.resources import TranscriptionJob
from recall_dev import librivox
from recall_dev.speech import SpeechUnavailable

REFERENCE = Path(__file__).parent / "data" / "whisper_cpu_path.json"
TOLERANCE = 0.010  # seconds a word's start or end may move
ROOT = Path(__file__).resolve().parents[2]
# Kernels every x86-64 machine with AVX2 runs alike.
PINNED = {"CT2_FORCE_CPU_ISA": "AVX2", "OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_NUM_THREADS": "1"}
Word = tuple[str, float, float]


def words_of(workdir: Path) -> list[list[Word]]:
    """Each chunk's words (text, start, end in the file) through the worker's engine path."""
    path = workdir / "librivox.wav"
    librivox.recording(path, repeat=3)
    spec = {"source": {"url": path.as_uri()}, "language": "en", "transcript": {"words": True}}
    job = TranscriptionJob.from_api({"metadata": {"name": "reference"}, "spec": spec})
    engine = WhisperEngine(threads=2, batch_size=2, device="cpu", compute_type="int8")
    with engine.load_media(job) as media:
        chunks = list(media.chunks())
    out: list[list[Word]] = []
    context = ""
    for i in range(0, len(chunks), 2):
        group = chunks[i : i + 2]
        request = TranscribeRequest.of(
            group, job=job, cancel=threading.Event(), language="en", context=context
        )
        for chunk, segments in zip(group, engine.transcribe_batch(request), strict=True):
            said = [
                (w.text, w.start + chunk.start, w.end + chunk.start)
                for s in segments
                for w in s.words or []
            ]
            out.append([(text, round(a, 3), round(b, 3)) for text, a, b in said])
            context = text_of(segments) or context  # the last chunk with text, as the worker
    return out


def pinned_words(workdir: Path) -> list[list[Word]]:
    """`words_of` in a process of its own with `PINNED` kernels."""
    out = workdir / "words.json"
    run = subprocess.run(
        [sys.executable, "-m", "tests.integration.test_whisper_cpu_path", "--words", str(out)],
        cwd=ROOT,
        env={**os.environ, **PINNED},
        capture_output=True,
        text=True,
        check=False,
    )
    if run.returncode != 0:
        pytest.fail(f"the engine path failed ({run.returncode}):\n{run.stderr[-4000:]}")
    return [[tuple(w) for w in chunk] for chunk in json.loads(out.read_text())]


def test_engine_path__the_same_words_each_within_10_ms_of_the_reference(tmp_path: Path) -> None:
    found = pinned_words(tmp_path)
    reference = [[tuple(w) for w in chunk] for chunk in json.loads(REFERENCE.read_text())]
    assert [[w[0] for w in c] for c in found] == [[w[0] for w in c] for c in reference]
    moved = [
        (a, b)
        for chunk, ref in zip(found, reference, strict=True)
        for a, b in zip(chunk, ref, strict=True)
        if abs(a[1] - b[1]) > TOLERANCE or abs(a[2] - b[2]) > TOLERANCE
    ]
    assert moved == []


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="the engine path's words, pinned")
    parser.add_argument("--write", action="store_true", help="write the reference")
    parser.add_argument("--words", type=Path, help="write the words to this file")
    args = parser.parse_args()
    import tempfile

    if args.write:
        with tempfile.TemporaryDirectory() as tmp:
            REFERENCE.write_text(json.dumps(pinned_words(Path(tmp))) + "\n")
    elif args.words:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                words = words_of(Path(tmp))
            except SpeechUnavailable as e:
                sys.exit(f"SpeechUnavailable: {e}")
            args.words.write_text(json.dumps(words))
