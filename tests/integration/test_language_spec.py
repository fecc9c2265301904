"""The language fields at admission on the real API server: `spec.language`,
`spec.languageOptions`, `spec.languageScope` and `spec.transcript.translate` on a job and as a
Batch's defaults; what the CRD's schema and CEL rules refuse (a code Whisper does not know,
options or segment scope with a fixed language)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from recall.kube.client import KubeClient as Kube
from recall.kube.client import api_message
from recall.resources import (
    BATCH_PLURAL,
    JOB_PLURAL,
    Batch,
    TranscriptionJob,
)
from tests.helpers import admission_batch, admission_job, create_raw


def job(fields: dict[str, Any]) -> dict[str, Any]:
    return admission_job("talk", fields)


def batch(fields: dict[str, Any]) -> dict[str, Any]:
    return admission_batch("talks", fields)


GOOD: list[dict[str, Any]] = [
    {"language": "de"},
    {"language": "yue"},
    {"language": "auto", "languageOptions": ["de", "fr", "en"]},
    {"languageOptions": ["es", "it"]},
    {"language": "auto", "languageScope": "segment"},
    {"languageOptions": ["de", "en"], "languageScope": "segment"},
    {"language": "fr", "languageScope": "file"},
    {"transcript": {"translate": "en"}},
    {"language": "auto", "transcript": {"translate": "en", "words": True}},
]

BAD: list[tuple[str, dict[str, Any], str]] = [
    ("unknown-language", {"language": "xx"}, "language must be auto or a language code"),
    ("unknown-option", {"languageOptions": ["de", "zz"]}, "languageOptions holds a code"),
    ("empty-options", {"languageOptions": []}, "languageOptions"),
    ("fixed-with-options", {"language": "de", "languageOptions": ["de", "fr"]}, "a fixed language"),
    ("fixed-segment-scope", {"language": "de", "languageScope": "segment"}, "languageScope"),
    ("unknown-scope", {"languageScope": "word"}, "languageScope"),
    ("translate-not-english", {"transcript": {"translate": "de"}}, "translate"),
]


@pytest.mark.parametrize("fields", GOOD, ids=lambda f: "-".join(f"{k}" for k in sorted(f)))
def test_language_fields__accepted_on_a_job_and_as_batch_defaults(
    kube: Kube, namespace: str, fields: dict[str, Any]
) -> None:
    made = TranscriptionJob.from_api(create_raw(kube, namespace, JOB_PLURAL, job(fields)))
    spec = made.spec.model_dump(by_alias=True, exclude_none=True)
    assert {k: spec[k] for k in fields} == fields
    defaults = Batch.from_api(create_raw(kube, namespace, BATCH_PLURAL, batch(fields)))
    got = defaults.spec.defaults.model_dump(by_alias=True, exclude_none=True)
    assert {k: got[k] for k in fields} == fields


@pytest.mark.parametrize(("case", "fields", "says"), BAD, ids=[c for c, _, _ in BAD])
def test_language_fields__refused_at_admission_naming_the_field(
    kube: Kube, namespace: str, case: str, fields: dict[str, Any], says: str
) -> None:
    for plural, body in ((JOB_PLURAL, job(fields)), (BATCH_PLURAL, batch(fields))):
        with pytest.raises(ApiException) as refused:
            create_raw(kube, namespace, plural, body)
        assert refused.value.status == 422, case
        assert says in api_message(refused.value), api_message(refused.value)


def test_language__an_items_unknown_code_is_refused(kube: Kube, namespace: str) -> None:
    body = batch({})
    body["spec"]["items"][0]["language"] = "qq"
    with pytest.raises(ApiException) as refused:
        create_raw(kube, namespace, BATCH_PLURAL, body)
    assert refused.value.status == 422
    assert "an item's language must be auto or a language code" in api_message(refused.value)


def test_example__the_multilingual_batch_and_job_are_accepted(kube: Kube, namespace: str) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "batch-multilingual.yaml"
    batch, job = yaml.safe_load_all(example.read_text())
    made = Batch.from_api(create_raw(kube, namespace, BATCH_PLURAL, batch))
    assert made.spec.defaults.language_options == ["de", "fr", "es", "en"]
    assert made.spec.items[-1].language == "de"
    panel = TranscriptionJob.from_api(create_raw(kube, namespace, JOB_PLURAL, job))
    assert panel.spec.language_scope == "segment"
    assert panel.spec.transcript is not None and panel.spec.transcript.translate == "en"
