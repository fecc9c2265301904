"""Languages through the whole system: the packaged multilingual base model in a real worker
process, the real API server and SeaweedFS, on a few seconds of espeak-ng speech per language.

- A Batch of a German and a Spanish file with `language: auto` among `languageOptions`: each
  job records the language it found with its probability; the English translation is
  published beside the original (en.srt) and named in `status.published`, json carries
  `translation`, aws.json `language_code` per item; the Batch counts its items by language,
  and the counts stay when its TTL deletes the jobs.
- `languageScope: segment` on a file that switches from German to Spanish to Italian: each
  segment carries the language spoken and the result the language of most speech.
- An English-only model (the bundled tiny.en) asked for options or a translation: once the
  worker has registered its model as English-only, the operator fails each job permanently,
  naming the model, without a lease (no attempt, nothing loaded); its Batch says so once
  (ModelFailing).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.languages import ENGLISH, LANGUAGES
from recall.bucket import Bucket
from recall.kube.client import KubeClient as Kube
from recall.protocol.workers import SELECTOR, EngineState, read
from recall.resources import API_VERSION, BATCH_PLURAL, GROUP, VERSION, Batch, Phase
from recall.transcripts import load_transcript
from recall_dev import speech
from tests.helpers import Procs, get_job, list_jobs, wait_for

pytestmark = pytest.mark.slow
OPTIONS = ["de", "es", "it", "en"]
BASE = {"name": "whisper", "model": "base", "chunkSeconds": 30}


def spoken(tmp_path: Path, name: str, said: list[tuple[str, int]]) -> tuple[Path, list[Any]]:
    """(language, sentence index) spoken into `name`.wav; each sentence's (start, end)."""
    out = tmp_path / f"{name}.wav"
    try:
        spans = speech.synthesize_voices([(lang, LANGUAGES[lang][i]) for lang, i in said], out)
    except speech.SpeechUnavailable as e:
        pytest.fail(str(e))
    return out, spans


def create(kube: Kube, namespace: str, plural: str, kind: str, name: str, spec: Any) -> None:
    body = {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name}, "spec": spec}
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body)


def batch_of(kube: Kube, namespace: str, name: str) -> Batch:
    raw = kube.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, BATCH_PLURAL, name)
    return Batch.from_api(raw)


def published(kube: Kube, namespace: str, name: str) -> bool:
    job = kube.get_job(namespace, name)  # None until the operator has created it
    return job is not None and job.status.published is not None


def failed(kube: Kube, namespace: str, name: str) -> bool:
    job = kube.get_job(namespace, name)
    return job is not None and job.status.phase is Phase.FAILED


def test_languages__detected_among_options_translated_and_counted_after_the_ttl(
    kube: Kube, namespace: str, procs: Procs, results: Bucket, outputs: Bucket, tmp_path: Path
) -> None:
    german, _ = spoken(tmp_path, "german", [("de", 1)])
    spanish, _ = spoken(tmp_path, "spanish", [("es", 3)])
    procs.recall("operator", "operator", "--namespace", namespace)
    procs.worker("worker", "--engine", "whisper", "--namespace", namespace, "--idle-exit", "60")
    create(
        kube,
        namespace,
        BATCH_PLURAL,
        "Batch",
        "talks",
        {
            "items": [
                {"key": "german", "source": {"url": german.as_uri()}},
                {"key": "spanish", "source": {"url": spanish.as_uri()}},
            ],
            "ttlSecondsAfterFinished": 15,
            "defaults": {
                "language": "auto",
                "languageOptions": OPTIONS,
                "engine": BASE,
                "leaseDurationSeconds": 60,
                "transcript": {"translate": "en"},
                "output": {"url": outputs.url_of("talks/{key}"), "formats": ["json", "srt"]},
            },
        },
    )
    names = ["talks-german", "talks-spanish"]
    wait_for(
        lambda: all(published(kube, namespace, n) for n in names), timeout=600, message=procs.dump
    )
    for key, language in (("german", "de"), ("spanish", "es")):
        job = get_job(kube, namespace, f"talks-{key}")
        assert job.status.phase is Phase.SUCCEEDED and job.status.result is not None
        assert job.status.result.language == language
        assert job.status.result.language_probability is not None
        assert job.status.published is not None
        assert job.status.published.formats == ["json", "srt", "en.srt"]
        data = json.loads(outputs.get(f"talks/{key}.json") or b"{}")
        assert data["language"] == language and data["translation"]["language"] == "en"
        english = (outputs.get(f"talks/{key}.en.srt") or b"").decode()
        assert "-->" in english
        said = {w.strip(".,!").lower() for w in data["translation"]["text"].split()}
        assert said and said <= {w.strip(".,!").lower() for w in english.split()}
        if key == "german":  # (how good translations are: docs/languages.md, Measured)
            assert {"bread", "family"} & said, (data["translation"]["text"], ENGLISH[1])
        transcript = load_transcript(results, job.status.result.transcript)
        assert transcript is not None and transcript.language == language
    # The counts by language, kept once the TTL deleted the jobs.
    wait_for(lambda: not list_jobs(kube, namespace), timeout=120, message=procs.dump)
    batch = batch_of(kube, namespace, "talks")
    assert batch.status.languages == {"de": 1, "es": 1}
    assert batch.status.counts is not None and batch.status.counts.completed == 2


def test_languages__segment_scope_on_a_file_that_switches_language(
    kube: Kube, namespace: str, procs: Procs, results: Bucket, tmp_path: Path
) -> None:
    path, spans = spoken(tmp_path, "switch", [("de", 0), ("es", 1), ("it", 3)])
    procs.recall("operator", "operator", "--namespace", namespace)
    procs.worker("worker", "--engine", "whisper", "--namespace", namespace, "--idle-exit", "60")
    spec = {
        "source": {"url": path.as_uri()},
        "language": "auto",
        "languageScope": "segment",
        "languageOptions": OPTIONS,
        "engine": BASE,
        "leaseDurationSeconds": 60,
    }
    create(kube, namespace, "transcriptionjobs", "TranscriptionJob", "switch", spec)
    wait_for(
        lambda: get_job(kube, namespace, "switch").status.phase is Phase.SUCCEEDED,
        timeout=400,
        message=procs.dump,
    )
    job = get_job(kube, namespace, "switch")
    assert job.status.result is not None
    transcript = load_transcript(results, job.status.result.transcript)
    assert transcript is not None
    right = total = 0.0  # the transcribed speech time, and the part of it in the right language
    for language, (a, b) in zip(["de", "es", "it"], spans, strict=True):
        for s in transcript.segments:
            overlap = max(0.0, min(b, s.end) - max(a, s.start))
            total += overlap
            right += overlap if s.language == language else 0.0
    assert total > 0.6 * sum(b - a for a, b in spans)  # most of the speech is transcribed
    assert right / total >= 0.9, [(s.start, s.end, s.language) for s in transcript.segments]
    seconds = {lang: b - a for lang, (a, b) in zip(["de", "es", "it"], spans, strict=True)}
    assert job.status.result.language == max(seconds, key=lambda k: seconds[k])


def registered_english_only(kube: Kube, namespace: str) -> bool:
    leases = kube.list_leases(namespace, SELECTOR).items
    return any(
        (read(lease).engine_state or EngineState("")).multilingual is False for lease in leases
    )


def test_languages__an_english_only_pool_fails_unleased_naming_it_and_the_batch_says_so_once(
    kube: Kube, namespace: str, procs: Procs, tmp_path: Path
) -> None:
    german, _ = spoken(tmp_path, "german", [("de", 1)])
    procs.recall("operator", "operator", "--namespace", namespace)
    # The operator's promise (recall.operator.dispatch): a worker that only claims what it is
    # offered never leases such a job. Serving itself (after 10 s without an offer, by default)
    # it may claim one before the operator fails it: that path is not under test here.
    no_self_service = {"RECALL_WORKER_SELF_SERVE_SECONDS": "3600"}
    procs.worker(
        "worker",
        "--engine",
        "whisper",
        "--namespace",
        namespace,
        "--idle-exit",
        "30",
        env=no_self_service,
    )
    wait_for(lambda: registered_english_only(kube, namespace), timeout=60, message=procs.dump)
    items = [{"key": f"f{i}", "source": {"url": german.as_uri()}} for i in range(3)]
    defaults = {"languageOptions": OPTIONS, "engine": {"name": "whisper"}, "maxAttempts": 3}
    create(kube, namespace, BATCH_PLURAL, "Batch", "old", {"items": items, "defaults": defaults})
    translate = {
        "source": {"url": german.as_uri()},
        "language": "de",
        "engine": {"name": "whisper"},
        "transcript": {"translate": "en"},
    }
    create(kube, namespace, "transcriptionjobs", "TranscriptionJob", "translate", translate)
    names = [f"old-f{i}" for i in range(3)] + ["translate"]
    wait_for(
        lambda: all(failed(kube, namespace, n) for n in names),
        timeout=240,
        message=procs.dump,
    )
    for name in names:
        job = get_job(kube, namespace, name)
        error = job.status.last_error
        assert error is not None and error.permanent
        assert (job.status.attempts, job.status.started_at) == (0, None)  # never leased
        assert "tiny.en" in (error.message or "") and "English-only" in (error.message or "")
        expected = (
            "TranslationUnsupported" if name == "translate" else "LanguageDetectionUnsupported"
        )
        assert error.reason == expected
    wait_for(
        lambda: any(
            c.type == "ModelFailing" for c in batch_of(kube, namespace, "old").status.conditions
        ),
        timeout=60,
        message=procs.dump,
    )
    conditions = batch_of(kube, namespace, "old").status.conditions
    (failing,) = [c for c in conditions if c.type == "ModelFailing"]
    assert failing.reason == "LanguageDetectionUnsupported" and "tiny.en" in (failing.message or "")
