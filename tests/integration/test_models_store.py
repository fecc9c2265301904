"""Models from the team's own store, against the real S3 server (SeaweedFS): the bundled tiny.en
uploaded with its SHA256SUMS is fetched once per node (several processes at once share one
download), checked, cached and loaded; a corrupt or missing model fails the job for good at its
first chunk, once, whichever worker claims it; the result records the model and its digest.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.cues import check, parse
from recall.base.settings import StoreSettings
from recall.bucket import Bucket, Stores
from recall.engines.models import ModelCache
from recall.engines.models.manifests import MANIFEST, manifest
from recall.engines.whisper import bundled_path
from recall.kube.client import KubeClient as Kube
from recall.resources import API_VERSION, Condition, Phase
from recall.resources.errors import JobFailure
from recall.transcripts import Transcript, load_transcript
from recall.worker.models import model_store
from recall_dev import librivox
from recall_dev.objstore import ObjectStore
from tests.helpers import ControllerThread, Procs, get_job, wait_for

pytestmark = pytest.mark.slow

PREFIX = "media/models/tiny"  # the workers' identity reads media/ in any bucket


@pytest.fixture(scope="module")
def models(object_store: ObjectStore, store_env: dict[str, str]) -> Iterator[Bucket]:
    """A bucket holding the bundled model as a team would upload it (with its SHA256SUMS)."""
    name = f"m-{uuid.uuid4().hex[:12]}"
    object_store.create_bucket(name)
    bucket = Stores(StoreSettings()).open(f"s3://{name}/{PREFIX}")
    source = bundled_path()
    for path in sorted(source.iterdir()):
        bucket.put(path.name, path.read_bytes())
    bucket.put(MANIFEST, manifest(source))
    try:
        yield bucket
    finally:
        object_store.delete_bucket(name)


@pytest.fixture(scope="module")
def digest() -> str:
    return ModelCache(Path("/nonexistent"), None).local(bundled_path(), "tiny.en").digest


def broken_copy(models: Bucket, name: str, *, corrupt: bool) -> str:
    """Another model directory in the same bucket: the bundled manifest with a changed
    vocabulary.txt (corrupt), or no manifest at all."""
    parent = models.url.rsplit("/", 1)[0]
    bucket = Stores(StoreSettings()).open(f"{parent}/{name}")
    source = bundled_path()
    for path in sorted(source.iterdir()):
        data = path.read_bytes()
        if corrupt and path.name == "vocabulary.txt":
            data = data.replace(b"the", b"teh", 1)
        bucket.put(path.name, data)
    if corrupt:
        bucket.put(MANIFEST, manifest(source))
    return bucket.url + "/"


FETCH = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from recall.base.settings import StoreSettings
    from recall.bucket import Stores
    from recall.engines.models import ModelCache
    from recall.worker.models import BucketModel, model_store

    downloads = []
    real = BucketModel.download
    def counted(self, name, into):
        downloads.append(name)
        return real(self, name, into)
    BucketModel.download = counted
    cache = ModelCache(Path(sys.argv[1]), model_store(Stores(StoreSettings())))
    model = cache.resolve(sys.argv[2])
    print(json.dumps({"path": str(model.path), "digest": model.digest, "downloads": downloads}))
    """
)


def test_model__fetched_once_by_several_processes_checked_and_cached(
    models: Bucket, digest: str, tmp_path: Path, store_env: dict[str, str]
) -> None:
    cache = tmp_path / "cache"
    url = models.url + "/"
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", FETCH, str(cache), url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    answers = []
    for run in runs:
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err[-2000:]
        answers.append(json.loads(out.strip().splitlines()[-1]))
    assert {a["digest"] for a in answers} == {digest}  # the same files: the same digest
    assert len({a["path"] for a in answers}) == 1
    fetched = [a for a in answers if a["downloads"]]
    assert len(fetched) == 1, answers  # one process downloaded, the others waited for it
    assert sorted(fetched[0]["downloads"]) == sorted(p.name for p in bundled_path().iterdir())
    assert sorted(p.name for p in cache.iterdir()) == [
        digest.replace(":", "-"),
        digest.replace(":", "-") + ".lock",
    ]  # nothing partial left
    again = ModelCache(cache, model_store(Stores(StoreSettings()))).resolve(url)
    assert (str(again.path), again.digest) == (answers[0]["path"], digest)


@pytest.mark.parametrize(("corrupt", "reason"), [(True, "ModelCorrupt"), (False, "ModelNotFound")])
def test_model__corrupt_or_without_manifest_is_a_permanent_failure(
    models: Bucket, tmp_path: Path, corrupt: bool, reason: str
) -> None:
    url = broken_copy(models, f"broken-{reason.lower()}", corrupt=corrupt)
    cache = ModelCache(tmp_path / "cache", model_store(Stores(StoreSettings())))
    with pytest.raises(JobFailure) as info:
        cache.resolve(url)
    assert (info.value.reason, info.value.permanent) == (reason, True)
    assert ("vocabulary.txt" if corrupt else MANIFEST) in info.value.message
    left = [p.name for p in (tmp_path / "cache").iterdir()] if (tmp_path / "cache").exists() else []
    assert all(name.endswith(".lock") for name in left), left  # no copy, complete or partial


def job(name: str, url: str, model: str, **spec: object) -> dict[str, object]:
    return {
        "apiVersion": API_VERSION,
        "kind": "TranscriptionJob",
        "metadata": {"name": name},
        "spec": {
            "source": {"url": url},
            "language": "en",
            "leaseDurationSeconds": 30,
            "maxAttempts": 3,
            "engine": {"name": "whisper", "model": model},
            **spec,
        },
    }


def whisper_env(tmp_path: Path) -> dict[str, str]:
    return {
        "RECALL_WORKER_ENGINE": "whisper",
        "RECALL_WORKER_WHISPER_THREADS": "1",
        "RECALL_WORKER_MODEL_CACHE_DIR": str(tmp_path / "models"),
    }


def test_worker__transcribes_with_the_store_model_and_records_it(
    kube: Kube,
    namespace: str,
    procs: Procs,
    results: Bucket,
    models: Bucket,
    digest: str,
    tmp_path: Path,
) -> None:
    speech = tmp_path / "librivox.wav"
    _, said = librivox.recording(speech)
    url = models.url + "/"
    kube.create_job(
        namespace,
        job(
            "talk",
            speech.as_uri(),
            url,
            transcript={"words": True},
            output={"url": "file:///out/{key}", "formats": ["json", "aws.json", "srt", "vtt"]},
        ),
    )
    worker = procs.worker("w1", "--namespace", namespace, env=whisper_env(tmp_path))
    done = wait_for(
        lambda: (j := get_job(kube, namespace, "talk")).status.phase is Phase.SUCCEEDED and j,
        timeout=300,
        message=procs.dump,
    )
    result = done.status.result
    assert result is not None
    assert (result.model, result.model_digest, result.language) == (url, digest, "en")
    transcript = load_transcript(results, result.transcript)
    assert isinstance(transcript, Transcript)
    assert transcript.model_digest == digest and transcript.word_timings
    words = [w for s in transcript.segments for w in s.words or []]
    assert len(words) >= len(said.split()) * 0.8
    starts = [w.start for w in words]
    assert starts == sorted(starts)
    for s in transcript.segments:
        assert all(s.start <= w.start <= w.end <= s.end for w in s.words or [])
    directory = result.transcript.rsplit("/", 1)[0]
    srt = results.get(f"{directory}/out.srt")
    assert srt is not None
    cues = parse(srt.decode(), "srt")
    assert cues and check(cues) == []
    aws = json.loads(results.get(f"{directory}/out.aws.json") or b"{}")
    assert aws["results"]["items"][0]["type"] == "pronunciation"
    assert [e for e in worker.events() if e.get("event") == "model_loaded"]


def test_worker__a_corrupt_model_fails_the_job_once_at_its_first_chunk(
    kube: Kube,
    namespace: str,
    procs: Procs,
    results: Bucket,
    models: Bucket,
    tmp_path: Path,
) -> None:
    speech = tmp_path / "librivox.wav"
    librivox.recording(speech)
    url = broken_copy(models, "corrupt-for-workers", corrupt=True)
    kube.create_job(namespace, job("talk", speech.as_uri(), url))
    env = whisper_env(tmp_path)
    for name in ("w1", "w2"):
        procs.worker(name, "--namespace", namespace, env=env)
    failed = wait_for(
        lambda: (j := get_job(kube, namespace, "talk")).status.phase is Phase.FAILED and j,
        timeout=300,
        message=procs.dump,
    )
    error = failed.status.last_error
    assert error is not None and error.reason == "ModelCorrupt" and error.permanent
    assert "vocabulary.txt" in (error.message or "")
    assert failed.status.attempts == 1  # not once per worker
    progress = failed.status.progress
    assert progress is None or progress.chunks_done == 0  # at its first chunk


def test_batch__auto_on_an_english_only_model_says_so_once(
    kube: Kube, namespace: str, procs: Procs, results: Bucket, tmp_path: Path
) -> None:
    speech = tmp_path / "librivox.wav"
    librivox.recording(speech)
    keys = ["a", "b", "c"]
    kube.create_batch(
        namespace,
        {
            "apiVersion": API_VERSION,
            "kind": "Batch",
            "metadata": {"name": "talks"},
            "spec": {
                "items": [{"key": k, "source": {"url": speech.as_uri()}} for k in keys],
                "defaults": {
                    "language": "auto",
                    "leaseDurationSeconds": 30,
                    "engine": {"name": "whisper"},
                },
            },
        },
    )
    with ControllerThread(kube, namespace, results):
        procs.worker("w1", "--namespace", namespace, env=whisper_env(tmp_path))

        def said_once() -> list[Condition] | None:
            b = kube.get_batch(namespace, "talks")
            counts = b.status.counts if b else None
            found = [c for c in (b.status.conditions if b else []) if c.type == "ModelFailing"]
            return found if counts is not None and counts.failed == 3 else None

        found: list[Condition] = wait_for(said_once, timeout=300, message=procs.dump)
        [condition] = found
    assert (condition.status, condition.reason) == ("True", "LanguageDetectionUnsupported")
    assert "tiny.en" in (condition.message or "") and "English-only" in (condition.message or "")
    for k in keys:
        j = get_job(kube, namespace, f"talks-{k}")
        # Failed once by the worker, or unleased by the operator once the worker registered
        # its model as English-only: never retried.
        assert j.status.last_error is not None and j.status.attempts <= 1
        assert j.status.last_error.reason == "LanguageDetectionUnsupported"
