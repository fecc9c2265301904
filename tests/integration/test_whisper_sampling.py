"""The same file, the same words, in every fresh worker process: a window whose text repeats
itself is decoded again with the temperature fallback, which samples, and CTranslate2's
sampling starts from `recall.engines.whisper.model.SAMPLING_SEED` in every process.

An espeak-ng dialogue of two voices (`recall_dev.dialogue`) in 10 s chunks, each decoded with
the text before as its prompt, as a worker decodes a job: tiny.en loops on its first window
("check, check, check…") and decodes it again. Unseeded, three processes wrote three
transcripts (69 to 111 words)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def transcribe(path: Path) -> list[str]:
    """The words of the dialogue at `path` through the engine, a chunk a call."""
    from recall.base import log
    from recall.engines.base import TranscribeRequest
    from recall.engines.whisper import WhisperEngine
    from recall.media.types import text_of
    from recall.resources import TranscriptionJob

    log.configure("info", "json")
    spec = {
        "source": {"url": path.as_uri()},
        "language": "en",
        "transcript": {"words": True},
        "engine": {"name": "whisper", "chunkSeconds": 10},
    }
    job = TranscriptionJob.from_api({"metadata": {"name": "talk"}, "spec": spec})
    engine = WhisperEngine(threads=2, device="cpu", compute_type="int8")
    words: list[str] = []
    context = ""
    with engine.load_media(job) as media:
        for chunk in media.chunks():
            request = TranscribeRequest.of(
                [chunk], job=job, cancel=threading.Event(), language="en", context=context
            )
            (segments,) = engine.transcribe_batch(request)
            words += [w.text for s in segments for w in s.words or []]
            context = text_of(segments) or context
    return words


def in_a_fresh_process(path: Path, out: Path) -> tuple[list[str], list[str]]:
    """The words, and the reasons of the windows decoded again (the engine's log)."""
    run = subprocess.run(
        [sys.executable, "-m", "tests.integration.test_whisper_sampling", str(path), str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    events = [
        json.loads(line) for line in (run.stdout + run.stderr).splitlines() if line[:1] == "{"
    ]
    again = [str(e.get("reason")) for e in events if e.get("event") == "window_decoded_again"]
    words: list[str] = json.loads(out.read_text())
    return words, again


def test_sampled_windows__the_same_words_in_every_fresh_process(tmp_path: Path) -> None:
    from recall_dev import dialogue

    talk = tmp_path / "talk.wav"
    dialogue.make(talk, speakers=2, turns=6, seed=3, low=3.0, high=8.0)
    first, again = in_a_fresh_process(talk, tmp_path / "first.json")
    second, _ = in_a_fresh_process(talk, tmp_path / "second.json")
    assert "repetitive" in again  # the sampling path ran
    assert first, "no words at all"
    assert second == first


if __name__ == "__main__":
    Path(sys.argv[2]).write_text(json.dumps(transcribe(Path(sys.argv[1]))))
