"""Batched inference through the whole system: a worker whose engine takes 4 chunks a call
(`RECALL_WORKER_BATCH_SIZE=4`, faster-whisper's batched pipeline) transcribes real read speech
(the LibriVox clips, `recall_dev.librivox`) on the real API server and object store, with the
words a worker taking one chunk at a time finds, in fewer engine calls (one a batch, as the
worker's `completed` line counts them), every chunk stored and checkpointed as its own, and the
device and compute type in the result."""

from __future__ import annotations

import math
from pathlib import Path

import jiwer
import pytest

from recall.bucket import Bucket
from recall.kube.client import KubeClient as Kube
from recall.resources import GROUP, JOB_PLURAL, VERSION, Phase
from recall.transcripts import load_transcript
from recall_dev import speech
from tests.audio import librivox_twice
from tests.helpers import Procs, get_job, job_phase, manifest, wait_for

pytestmark = pytest.mark.slow

MAX_WORDS_CHANGED = 0.05  # the share of words batching may change (none did when measured)


@pytest.fixture(scope="module")
def read_speech(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return librivox_twice(tmp_path_factory)


def transcribe(
    kube: Kube, namespace: str, procs: Procs, results: Bucket, path: Path, batch_size: int
) -> tuple[str, list[object]]:
    """The transcript of `path` by one worker with `batch_size`, and the chunks it stored."""
    name = f"talk-b{batch_size}"
    kube.custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        JOB_PLURAL,
        manifest(
            "TranscriptionJob",
            name,
            {
                "source": {"url": path.as_uri()},
                "language": "en",
                "leaseDurationSeconds": 30,
                "engine": {"name": "whisper", "chunkSeconds": 10},
                "transcript": {"words": True},
            },
        ),
    )
    worker = procs.worker(
        name,
        "--engine",
        "whisper",
        "--namespace",
        namespace,
        "--max-jobs",
        "1",
        env={"RECALL_WORKER_BATCH_SIZE": str(batch_size)},
    )
    wait_for(
        lambda: job_phase(kube, namespace, name) == Phase.SUCCEEDED,
        timeout=300,
        message=procs.dump,
    )
    assert worker.wait(timeout=60) == 0
    job = get_job(kube, namespace, name)
    result = job.status.result
    assert result is not None and job.status.attempts == 1
    assert (result.device, result.compute_type) == ("cpu", "int8_float32")
    progress = job.status.progress
    assert progress is not None and progress.chunks_done == progress.chunks_total
    transcript = load_transcript(results, result.transcript)
    assert transcript is not None
    starts = [s.start for s in transcript.segments]
    assert starts == sorted(starts), "segments out of order"
    for s in transcript.segments:
        assert s.words, f"words asked for, none given: {s}"
        assert [w.start for w in s.words] == sorted(w.start for w in s.words)
    events = worker.events()
    stored = [e["chunk"] for e in events if e.get("event") == "chunk_done"]
    assert stored == list(range(progress.chunks_total)), "a chunk stored twice, or none"
    # The engine calls the worker made (its `completed` line): a batch is one call, so
    # RECALL_WORKER_BATCH_SIZE taken means ceil(chunks / batch_size) of them.
    calls = [e["engine_calls"] for e in events if e.get("event") == "completed"]
    assert calls == [math.ceil(progress.chunks_total / batch_size)], calls
    return transcript.text, stored


def test_batch_size_4__the_words_of_one_chunk_at_a_time_through_the_whole_system(
    kube: Kube,
    namespace: str,
    procs: Procs,
    results: Bucket,
    read_speech: tuple[Path, str],
) -> None:
    path, said = read_speech
    procs.recall("operator", "operator", "--namespace", namespace)
    one, one_chunks = transcribe(kube, namespace, procs, results, path, 1)
    four, four_chunks = transcribe(kube, namespace, procs, results, path, 4)
    # The same chunks (cut at silences, ~10 s), each stored on its own in both: a batch is
    # checkpointed as the chunks it holds. More than one batch of 4 (7 chunks when measured:
    # the last batch short).
    assert one_chunks == four_chunks and len(four_chunks) > 4
    norm = speech.normalise
    changed = jiwer.wer(norm(one), norm(four))
    assert changed <= MAX_WORDS_CHANGED, f"{changed:.3f} of the words changed:\n{one}\n{four}"
    assert jiwer.wer(norm(said), norm(four)) <= 0.1, four
