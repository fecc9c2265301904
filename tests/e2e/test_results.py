"""The work's bytes in the real S3 server, through the whole system: sources in a bucket, outputs
published where users want them, the results index after the TTL, the second record healed
after a crash, and what stays when a Batch goes.

`recall submit s3://<bucket>/talks/` turns a bucket prefix into one Batch; simulated workers
take the real audio path (fetch from the bucket, decode, cut); the operator publishes srt and
json to a second bucket; `recall transcript BATCH/KEY` reads the job's result, and the index
once the TTL deleted the jobs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
import wave
from pathlib import Path

import numpy as np
import pytest

from recall.bucket import Bucket
from recall.kube.client import KubeClient as Kube
from recall.resources import BATCH_PLURAL, GROUP, VERSION, Phase
from tests.helpers import Procs, get_batch, list_jobs, store_keys, wait_for

pytestmark = pytest.mark.slow
KEYS = ["alpha", "beta", "gamma"]


def speech_like(path: Path, seconds: float, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    samples = (rng.standard_normal(int(seconds * 16_000)) * 0.1).astype(np.float32)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16_000)
        w.writeframes((samples * 32767).astype("<i2").tobytes())
    return path.read_bytes()


def recall_cli(procs: Procs, namespace: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "recall", *args, "--namespace", namespace],
        env=procs.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_bucket_prefix_in_outputs_out_then_the_index_after_the_ttl(
    kube: Kube, namespace: str, procs: Procs, results: Bucket, outputs: Bucket, tmp_path: Path
) -> None:
    for i, key in enumerate(KEYS):
        results.put(f"media/talks/{key}.wav", speech_like(tmp_path / f"{key}.wav", 25.0, i))
    results.put("media/talks/notes.txt", b"not media")
    procs.recall("operator", "operator", "--namespace", namespace)
    env = {"RECALL_WORKER_SIMULATED_MEDIA": "true", "RECALL_WORKER_CHUNK_SECONDS": "10"}
    procs.worker("w", "--engine", "simulated", "--namespace", namespace, env=env)
    out = recall_cli(
        procs, namespace, "submit", results.url_of("media/talks/"), "--name", "talks",
        "--engine", "simulated", "--output", outputs.url_of("talks/{key}"),
        "--formats", "srt,json", "--ttl", "20",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    wait_for(
        lambda: get_batch(kube, namespace, "talks").status.complete,
        timeout=120,
        message=procs.dump,
    )
    batch = get_batch(kube, namespace, "talks")
    assert batch.status.counts.completed == 3 and batch.status.counts.published == 3
    jobs = list_jobs(kube, namespace)
    assert all(j.status.phase == Phase.SUCCEEDED and j.status.published for j in jobs)
    assert all(len(json.dumps(j.to_api())) < 4096 for j in jobs)  # the ledger only
    # Outputs in the other bucket (streamed across buckets), one per format, for each item.
    published = sorted(o.key for o in outputs.list())
    assert published == sorted(f"talks/{k}.{f}" for k in KEYS for f in ("json", "srt"))
    srt = outputs.get("talks/alpha.srt")
    assert srt is not None and srt.startswith(b"1\n00:00:00,000 --> ")
    # recall transcript reads the result; --url presigns it.
    text = recall_cli(procs, namespace, "transcript", "talks/alpha")
    assert text.returncode == 0 and "chunk" in text.stdout, text.stderr
    url = recall_cli(procs, namespace, "transcript", "talks/alpha", "--url").stdout.strip()
    assert url.startswith("http://127.0.0.1:")
    with urllib.request.urlopen(url, timeout=10) as r:
        assert json.loads(r.read())["job"] == "talks-alpha"
    # After the TTL the jobs go; the status is frozen and the index still answers.
    wait_for(lambda: not list_jobs(kube, namespace), timeout=60, message=procs.dump)
    after = get_batch(kube, namespace, "talks")
    assert after.status.counts == batch.status.counts
    again = recall_cli(procs, namespace, "transcript", "talks/alpha", "--format", "srt")
    assert again.returncode == 0 and again.stdout.encode() == srt, again.stderr
    wait_for(
        lambda: store_keys(results, namespace) == [],
        timeout=30,
        message=lambda: f"the deleted jobs' objects to go: {store_keys(results, namespace)}",
    )
    # Deleting the Batch takes its index; the outputs are the user's and stay.
    kube.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, BATCH_PLURAL, "talks")
    wait_for(
        lambda: not [o for o in results.list("index/") if "/talks/" in o.key],
        timeout=60,
        message="the Batch's index to go",
    )
    assert sorted(o.key for o in outputs.list()) == published


def test_a_crash_between_succeeded_and_the_publish_is_healed(
    kube: Kube, namespace: str, procs: Procs, results: Bucket, outputs: Bucket
) -> None:
    crash = {"RECALL_FAULT": "operator-after-publish"}
    first = procs.recall("operator", "operator", "--namespace", namespace, env=crash)
    procs.worker("w", "--engine", "simulated", "--namespace", namespace)
    job = {
        "apiVersion": "recall.dev/v1alpha1",
        "kind": "TranscriptionJob",
        "metadata": {"name": "solo"},
        "spec": {
            "source": {"url": "file:///media/solo.wav"},
            "engine": {"name": "simulated"},
            "output": {"url": outputs.url_of("solo/{key}"), "formats": ["txt"]},
        },
    }
    kube.create_job(namespace, job)
    assert first.wait(timeout=60) != 0, "the fault should have killed the operator"
    solo = kube.get_job(namespace, "solo")
    assert solo is not None and solo.status.phase == Phase.SUCCEEDED
    assert solo.status.published is None  # the outputs are written, the record is not
    assert outputs.get("solo/solo.txt") is not None
    procs.recall("operator-2", "operator", "--namespace", namespace)
    wait_for(
        lambda: (j := kube.get_job(namespace, "solo")) is not None and j.status.published,
        timeout=60,
        message=procs.dump,
    )
    healed = kube.get_job(namespace, "solo")
    assert healed is not None and healed.status.published is not None
    assert healed.status.published.formats == ["txt"]
    assert healed.status.result == solo.status.result  # the same accepted result
