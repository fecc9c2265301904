"""`spec.transcript` (speakers, channels, redact) at admission on the real API server: what it
accepts on a job and as a Batch default, what the CRD's schema and CEL rules refuse, and that
the job's spec stays immutable."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from recall.kube.client import MERGE_PATCH, api_message
from recall.kube.client import KubeClient as Kube
from recall.resources import (
    BATCH_PLURAL,
    GROUP,
    JOB_PLURAL,
    MAX_SPEAKERS,
    VERSION,
    Batch,
    TranscriptionJob,
)
from tests.helpers import admission_batch, admission_job, create_raw


def job(transcript: dict[str, Any]) -> dict[str, Any]:
    return admission_job("calls", {"transcript": transcript})


def batch(transcript: dict[str, Any]) -> dict[str, Any]:
    return admission_batch("calls", {"transcript": transcript})


GOOD = [
    {"speakers": {}},
    {"speakers": {"count": 2}},
    {"speakers": {"min": 2, "max": 4}},
    {"speakers": {"min": 3, "max": 3}},
    {"speakers": {"max": MAX_SPEAKERS}},
    {"channels": "split"},
    {"channels": "mixed", "words": True},
    {"redact": {"types": ["email", "phone", "card", "iban", "nationalId"]}},
    {"redact": {"types": ["phone"], "audio": True, "keepOriginal": True}},
    {"speakers": {"count": 2}, "channels": "split", "redact": {"types": ["email"]}},
]

BAD: list[tuple[str, dict[str, Any], str]] = [
    ("min-over-max", {"speakers": {"min": 4, "max": 2}}, "speakers.min must not be greater"),
    ("count-zero", {"speakers": {"count": 0}}, "transcript.speakers.count"),
    ("count-too-many", {"speakers": {"count": MAX_SPEAKERS + 1}}, "speakers.count"),
    ("max-too-many", {"speakers": {"max": MAX_SPEAKERS + 1}}, "speakers.max"),
    ("count-and-min", {"speakers": {"count": 2, "min": 1}}, "speakers.count cannot be given"),
    ("channels-unknown", {"channels": "stereo"}, "transcript.channels"),
    ("redact-unknown-type", {"redact": {"types": ["email", "passport"]}}, "redact.types"),
    ("redact-no-types", {"redact": {"audio": True}}, "redact.types"),
    ("redact-empty-types", {"redact": {"types": []}}, "redact.types"),
    ("redact-not-a-list", {"redact": {"types": "email"}}, "redact.types"),
]


@pytest.mark.parametrize("transcript", GOOD, ids=lambda t: "-".join(sorted(t)))
def test_transcript__accepted_on_a_job_and_as_a_batch_default(
    kube: Kube, namespace: str, transcript: dict[str, Any]
) -> None:
    made = TranscriptionJob.from_api(create_raw(kube, namespace, JOB_PLURAL, job(transcript)))
    assert made.spec.transcript is not None
    assert made.spec.transcript.model_dump(by_alias=True, exclude_none=True) == transcript
    defaults = Batch.from_api(create_raw(kube, namespace, BATCH_PLURAL, batch(transcript)))
    assert defaults.spec.defaults.transcript == made.spec.transcript


@pytest.mark.parametrize(("case", "transcript", "says"), BAD, ids=[c for c, _, _ in BAD])
def test_transcript__refused_at_admission_with_the_field_named(
    kube: Kube, namespace: str, case: str, transcript: dict[str, Any], says: str
) -> None:
    for plural, body in ((JOB_PLURAL, job(transcript)), (BATCH_PLURAL, batch(transcript))):
        with pytest.raises(ApiException) as refused:
            create_raw(kube, namespace, plural, body)
        assert refused.value.status == 422, case
        assert says in api_message(refused.value), api_message(refused.value)


def test_transcript__the_spec_stays_immutable(kube: Kube, namespace: str) -> None:
    create_raw(kube, namespace, JOB_PLURAL, job({"redact": {"types": ["email"]}}))
    with pytest.raises(ApiException) as refused:
        kube.custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            JOB_PLURAL,
            "calls",
            {"spec": {"transcript": {"redact": {"types": ["phone"]}}}},
            _content_type=MERGE_PATCH,
        )
    assert refused.value.status == 422
    assert "immutable" in api_message(refused.value)
