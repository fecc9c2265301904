"""What an English-only pool cannot do, failed unleased by the operator, against the real API
server: the controller reads the workers' registration Leases, rejects a job asking for
language detection or translation with its worker's permanent reason, and the CRD's CEL rule
takes that Queued -> Failed write with attempts left, and only for those reasons."""

from __future__ import annotations

from typing import Any

import pytest

from recall.base.clock import SYSTEM
from recall.base.settings import OperatorSettings
from recall.kube import ApiError
from recall.kube.client import KubeClient as Kube
from recall.operator.controller import Controller
from recall.operator.runtime.wiring import wire
from recall.protocol.workers import LOADED, SELECTOR, EngineState
from recall.worker.registration import Registration
from tests.helpers import get_job, manifest
from tests.unit.fakes import memory_bucket

pytestmark = pytest.mark.integration

TINY = "tiny.en@sha256:" + "ab" * 32


def create(kube: Kube, namespace: str, name: str, **spec: Any) -> None:
    body = {"source": {"url": "file:///media/a.wav"}, "engine": {"name": "whisper"}, **spec}
    kube.create_job(namespace, manifest("TranscriptionJob", name, body))


def register(kube: Kube, namespace: str, worker: str, multilingual: bool) -> None:
    state = EngineState(LOADED, TINY if not multilingual else "base@x", multilingual=multilingual)
    Registration(kube, namespace, worker, "whisper", engine_state=lambda: state).renew_once()


def tick(kube: Kube, namespace: str) -> Controller:
    """One leading controller's tick over what the API server holds now."""
    controller = wire(kube, OperatorSettings(namespace=namespace), results=memory_bucket())
    controller.leading.set()
    controller.cache.relisted(iter(kube.list_jobs(namespace).items))
    controller.registry.relisted(iter(kube.list_leases(namespace, SELECTOR).items))
    controller.run_once(SYSTEM.monotonic())
    return controller


def test_operator__rejects_unleased_what_an_english_only_pool_cannot_do(
    kube: Kube, namespace: str
) -> None:
    create(kube, namespace, "auto", language="auto", languageOptions=["de", "fr"])
    create(kube, namespace, "translate", language="de", transcript={"translate": "en"})
    create(kube, namespace, "english", language="en")
    for worker in ("w1", "w2", "w3"):
        register(kube, namespace, worker, multilingual=False)
    tick(kube, namespace)
    for name, reason in (
        ("auto", "LanguageDetectionUnsupported"),
        ("translate", "TranslationUnsupported"),
    ):
        status = get_job(kube, namespace, name).status
        assert status.phase == "Failed" and status.last_error is not None
        assert (status.last_error.reason, status.last_error.permanent) == (reason, True)
        assert f"model {TINY} is English-only" in (status.last_error.message or "")
        assert (status.attempts, status.lease, status.started_at) == (0, None, None)
        failed = [c for c in status.conditions if c.type == "Failed"]
        assert failed and failed[0].reason == reason
    english = get_job(kube, namespace, "english").status
    assert english.phase == "Queued" and english.offer is not None


def test_operator__a_multilingual_worker_in_the_pool_keeps_the_job(
    kube: Kube, namespace: str
) -> None:
    create(kube, namespace, "auto", language="auto")
    register(kube, namespace, "w1", multilingual=False)
    register(kube, namespace, "w2", multilingual=True)
    tick(kube, namespace)
    status = get_job(kube, namespace, "auto").status
    assert status.phase == "Queued" and status.offer is not None


@pytest.mark.parametrize(
    "error",
    [
        {"reason": "SourceNotFound", "message": "m", "permanent": True},
        {"reason": "LanguageDetectionUnsupported", "message": "m", "permanent": False},
        None,
    ],
    ids=["another-reason", "not-permanent", "no-error"],
)
def test_cel__queued_to_failed_with_attempts_left_only_for_the_pool_s_model(
    kube: Kube, namespace: str, error: dict[str, Any] | None
) -> None:
    create(kube, namespace, "j")
    patch: dict[str, Any] = {"phase": "Failed", "completedAt": "2026-12-04T12:00:00Z"}
    if error is not None:
        patch["lastError"] = error
    with pytest.raises(ApiError, match="becomes Failed only when its attempts are spent"):
        kube.patch_job_status(namespace, "j", None, patch)
    allowed = {"reason": "TranslationUnsupported", "message": "m", "permanent": True}
    kube.patch_job_status(namespace, "j", None, {**patch, "lastError": allowed})
    assert get_job(kube, namespace, "j").status.phase == "Failed"
