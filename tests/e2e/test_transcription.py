"""Real transcription through the whole system: the local Whisper engine in worker processes,
checkpoints on the renewals' cadence, resume after a crash (with the words' times), media
errors that fail at once, and the words a job asked for in `recall transcript`'s json and
aws.json."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jiwer
import pytest

from recall.bucket import Bucket
from recall.kube.client import KubeClient as Kube
from recall.operator import usage
from recall.resources import BATCH_PLURAL, GROUP, VERSION, Phase
from recall.transcripts import load_transcript
from recall_dev import speech
from tests.helpers import (
    Procs,
    get_job,
    manifest,
    wait_for_phase,
    wait_for_the_result_alone,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def spoken(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """Six known sentences spoken into one ~57 s WAV."""
    out = tmp_path_factory.mktemp("speech") / "six.wav"
    try:
        speech.synthesize(speech.SENTENCES, out)
    except speech.SpeechUnavailable as e:
        pytest.fail(str(e))
    return out, " ".join(speech.SENTENCES)


def whisper_batch(
    kube: Kube,
    namespace: str,
    name: str,
    items: dict[str, str],
    *,
    lease: int = 6,
    chunk_seconds: int = 10,
    max_attempts: int = 5,
    checkpoint_seconds: float | None = None,
    words: bool = False,
) -> None:
    defaults: dict[str, object] = {
        "language": "en",
        "leaseDurationSeconds": lease,
        "maxAttempts": max_attempts,
        "engine": {"name": "whisper", "chunkSeconds": chunk_seconds},
    }
    if words:
        defaults["transcript"] = {"words": True}
    if checkpoint_seconds is not None:
        defaults["checkpointSeconds"] = checkpoint_seconds
    kube.custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        BATCH_PLURAL,
        manifest(
            "Batch",
            name,
            {
                "items": [{"key": k, "source": {"url": url}} for k, url in items.items()],
                "defaults": defaults,
            },
        ),
    )


def chunk_events(events: list[dict[str, object]]) -> list[object]:
    return [e["chunk"] for e in events if e.get("event") == "chunk_done"]


def test_resume__second_attempt_transcribes_only_the_chunks_after_the_checkpoint(
    kube: Kube, namespace: str, procs: Procs, results: Bucket, spoken: tuple[Path, str]
) -> None:
    path, reference = spoken
    procs.recall("operator", "operator", "--namespace", namespace)
    # A checkpoint every second: each few chunks are named by a renewal as they are stored.
    whisper_batch(kube, namespace, "talk", {"six": path.as_uri()}, checkpoint_seconds=1, words=True)
    first = procs.worker(
        "first",
        "--engine",
        "whisper",
        "--namespace",
        namespace,
        env={"RECALL_FAULT": "worker-after-chunk:3"},  # killed once 3 chunks are checkpointed
    )
    assert first.wait(timeout=180) < 0, "the fault should have killed the first worker"
    job = get_job(kube, namespace, "talk-six")
    assert job.status.progress is not None
    done = job.status.progress.chunks_done
    assert 3 <= done < 6 and job.status.progress.chunks_total == 6
    (part,) = job.status.progress.parts  # the checkpoint: attempt 1's first `done` chunks
    assert (part.attempt, part.first, part.end) == (1, 0, done)
    # Chunks are stored (chunk_done) before a renewal names them, in order.
    assert chunk_events(first.events())[:done] == list(range(done))

    # It must outwait the dead worker's lease (6 s) and the reclaim before it idles out.
    second = procs.worker(
        "second", "--engine", "whisper", "--namespace", namespace, "--idle-exit", "30"
    )
    wait_for_phase(kube, namespace, "talk-six", Phase.SUCCEEDED, timeout=180, procs=procs)
    assert second.wait(timeout=60) == 0
    # The engine ran only for the chunks the checkpoint did not hold.
    assert chunk_events(second.events()) == list(range(done, 6))
    assert "resumed" in second.event_names()

    job = get_job(kube, namespace, "talk-six")
    assert (job.status.attempts, job.status.expired_leases) == (2, 1)
    assert job.status.result is not None and job.status.result.attempt == 2
    transcript = load_transcript(results, job.status.result.transcript)
    assert transcript is not None
    starts = [s.start for s in transcript.segments]
    assert starts == sorted(starts), "segments out of order"
    assert transcript.segments[-1].end > 45, "the transcript does not reach the end"
    wer = jiwer.wer(speech.normalise(reference), speech.normalise(transcript.text))
    assert wer <= 0.25, f"WER {wer:.2f}: {transcript.text}"
    # The words survive the resume: absolute, in order, inside their segments, on both sides
    # of the checkpoint (chunks of 10 s: the second attempt's start at `done` * 10 s).
    words = [w for s in transcript.segments for w in s.words or []]
    assert all(s.words for s in transcript.segments), "a segment without words"
    assert all(
        s.start <= w.start <= w.end <= s.end for s in transcript.segments for w in s.words or []
    )
    assert all(a.end <= b.start for a, b in itertools.pairwise(words)), "word times go back"
    assert any(w.start < done * 10 for w in words) and any(w.start > done * 10 for w in words)
    # The accepted transcript is all that stays: both attempts' chunks and cuttings go once it
    # is accepted (the operator collects them), and no ConfigMap holds the work: the only one
    # the operator writes is the usage record, counts per day.
    wait_for_the_result_alone(results, namespace, job, attempt=2, timeout=30)
    maps = {c.metadata.name: c.data for c in kube.core.list_namespaced_config_map(namespace).items}
    assert set(maps) - {"kube-root-ca.crt", usage.CONFIG_MAP} == set()
    record = maps.get(usage.CONFIG_MAP) or {}
    days = [key for key in record if key[:1].isdigit()]
    for day in days:
        assert set(json.loads(record[day])) == {"jobs", "audioSeconds", "engineSeconds"}
    # Beside the days: the marks of the jobs counted, and the ids of the last writes.
    assert {key for key in record if key not in days} <= {f"counted.{d}" for d in days} | {"writes"}


def test_bad_media__fails_at_once_with_a_clear_reason(
    kube: Kube, namespace: str, procs: Procs, tmp_path: Path
) -> None:
    not_audio = tmp_path / "notes.wav"
    not_audio.write_text("these are meeting notes, not audio\n" * 50)
    missing = tmp_path / "nowhere.wav"
    procs.recall("operator", "operator", "--namespace", namespace)
    whisper_batch(kube, namespace, "bad", {"missing": missing.as_uri(), "text": not_audio.as_uri()})
    procs.worker("w", "--engine", "whisper", "--namespace", namespace, "--idle-exit", "5")
    for name in ("bad-missing", "bad-text"):
        wait_for_phase(kube, namespace, name, Phase.FAILED, timeout=60, procs=procs)
    gone = get_job(kube, namespace, "bad-missing").status
    text = get_job(kube, namespace, "bad-text").status
    assert gone.last_error is not None and text.last_error is not None
    assert (gone.last_error.reason, gone.attempts) == ("SourceNotFound", 1)
    assert str(missing) in (gone.last_error.message or "")
    assert (text.last_error.reason, text.attempts) == ("UndecodableMedia", 1)
    assert gone.last_error.permanent and text.last_error.permanent


def test_transcript__json_and_aws_json_show_the_words_the_job_asked_for(
    kube: Kube, namespace: str, procs: Procs, spoken: tuple[Path, str]
) -> None:
    """A Batch that asks for words (`defaults.transcript.words`): `recall transcript
    BATCH/ITEM --format json` shows every segment's words with their times and probability,
    and `--format aws.json` an item per word with its times and confidence, in order."""
    path, _ = spoken
    procs.recall("operator", "operator", "--namespace", namespace)
    whisper_batch(kube, namespace, "talk", {"six": path.as_uri()}, lease=30, words=True)
    procs.worker("w", "--engine", "whisper", "--namespace", namespace, "--idle-exit", "5")
    wait_for_phase(kube, namespace, "talk-six", Phase.SUCCEEDED, timeout=180, procs=procs)

    def transcript(fmt: str) -> dict[str, Any]:
        args = ["transcript", "talk/six", "--format", fmt, "--namespace", namespace]
        done = subprocess.run(
            [sys.executable, "-m", "recall", *args],
            env=procs.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        data: dict[str, Any] = json.loads(done.stdout)
        return data

    data = transcript("json")
    assert data["wordTimings"] is True and data["segments"]
    for s in data["segments"]:
        assert s["words"] and 0 < s["confidence"] <= 1
        assert all(s["start"] <= w["start"] <= w["end"] <= s["end"] for w in s["words"])
        assert all(0 < w["probability"] <= 1 and w["word"].strip() for w in s["words"])
    words = [w for s in data["segments"] for w in s["words"]]
    starts = [w["start"] for w in words]
    assert starts == sorted(starts) and starts[-1] > 40  # absolute, across the chunks
    said = [w for w in words if speech.normalise(w["word"])]  # not a lone mark
    text = " ".join(speech.normalise(w["word"]) for w in said)
    assert text == speech.normalise(data["text"])

    aws = transcript("aws.json")["results"]
    assert aws["transcripts"][0]["transcript"] == data["text"]
    items = [
        i
        for i in aws["items"]
        if i["type"] == "pronunciation" and speech.normalise(i["alternatives"][0]["content"])
    ]
    assert [speech.normalise(i["alternatives"][0]["content"]) for i in items] == [
        speech.normalise(w["word"]) for w in said
    ]
    for item, word in zip(items, said, strict=True):
        assert float(item["start_time"]) == pytest.approx(word["start"], abs=0.001)
        assert float(item["end_time"]) == pytest.approx(word["end"], abs=0.001)
        confidence = float(item["alternatives"][0]["confidence"])
        assert confidence == pytest.approx(word["probability"], abs=0.001)
    assert len(aws["audio_segments"]) == len(data["segments"])
