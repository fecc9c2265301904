"""The engine path's words and times stay those of the reference: LibriVox read speech
(`recall_dev.librivox`, the clips three times over: three chunks) through the worker's path
(the engine opens, decodes and cuts the media; `transcribe_batch` of two chunks a call, the
text before as context; words asked for) on the CPU, int8, two threads, the bundled tiny.en.

`data/whisper_cpu_path.json` was written by the engine before its CPU outside the model was
cut, with numpy's BLAS at one thread (`OPENBLAS_NUM_THREADS=1`; the engine now holds it there
itself: with two BLAS threads the features differ in their last bit and tiny.en wrote two
commas more and moved a word by 20 ms). `python -m tests.integration.test_whisper_cpu_path
--write` writes it again. Every change to the speech detection, the features, the windows or
the word alignment must keep the same words, each word's times within 10 ms."""

from __future__ import annotations

import argparse
import json
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


def test_engine_path__the_same_words_each_within_10_ms_of_the_reference(tmp_path: Path) -> None:
    try:
        found = words_of(tmp_path)
    except SpeechUnavailable as e:
        pytest.fail(str(e))
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
    parser = argparse.ArgumentParser(description="write the reference words")
    parser.add_argument("--write", action="store_true")
    if parser.parse_args().write:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            REFERENCE.write_text(json.dumps(words_of(Path(tmp))) + "\n")
