"""The memory store keeps what the code relies on from the API server: resourceVersion, the
status split, the CRD's rules, selections in lists and watches, ConfigMap size."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from recall.kube import Conflict, Invalid, NotFound, Selector, Unavailable
from recall.resources import TranscriptionJob
from recall_dev.twin.api import Fault, MemoryApi
from tests.unit.fakes import NS, job_manifest

TOKEN = "c" * 32


def claim_patch(attempts: int = 1, token: str = TOKEN) -> dict[str, object]:
    return {
        "phase": "Leased",
        "attempts": attempts,
        "fence": f"{token}/1",
        "lease": {
            "holder": "w",
            "token": token,
            "acquireTime": "2026-11-30T12:00:00Z",
            "renewTime": "2026-11-30T12:00:00Z",
            "durationSeconds": 10,
        },
    }


def test_create__defaults_and_queued_status_whatever_the_body_says() -> None:
    store = MemoryApi()
    manifest = job_manifest("a")
    manifest["status"] = {"phase": "Succeeded"}
    job = store.create_job(NS, manifest)
    assert job.status.phase == "Queued"
    assert (job.spec.max_attempts, job.spec.max_releases, job.spec.priority) == (5, 10, 0)
    with pytest.raises(Conflict):
        store.create_job(NS, job_manifest("a"))


def test_status_patch__stale_version_conflicts_current_applies() -> None:
    store = MemoryApi()
    job = store.create_job(NS, job_manifest("a"))
    written = store.patch_job_status(NS, "a", job.resource_version, claim_patch())
    assert written.status.phase == "Leased"
    assert written.resource_version != job.resource_version
    with pytest.raises(Conflict):
        store.patch_job_status(NS, "a", job.resource_version, {"attempts": 2})


def test_status_patch__refused_by_the_rules_changes_nothing() -> None:
    store = MemoryApi()
    store.create_job(NS, job_manifest("a"))
    leased = store.patch_job_status(NS, "a", None, claim_patch())
    with pytest.raises(Invalid, match="fence"):
        store.patch_job_status(NS, "a", None, {"lease": {"renewTime": "2026-11-30T12:01:00Z"}})
    assert store.get_job(NS, "a") == leased


def test_labels_patch__leaves_status_alone() -> None:
    store = MemoryApi()
    store.create_job(NS, job_manifest("a"))
    job = store.patch_job_labels(NS, "a", {"recall.dev/suspended": "true"})
    assert job.suspended and job.status.phase == "Queued"
    assert not store.patch_job_labels(NS, "a", {"recall.dev/suspended": None}).suspended
    with pytest.raises(NotFound):
        store.patch_job_labels(NS, "nope", {"x": "y"})


def test_list__selects_by_field_and_label_and_pages() -> None:
    store = MemoryApi()
    for i in range(5):
        store.create_job(NS, job_manifest(f"j{i}"))
    store.patch_job_status(NS, "j1", None, claim_patch())
    queued = store.list_jobs(NS, Selector(fields="status.phase=Queued"))
    assert sorted(o["metadata"]["name"] for o in queued.items) == ["j0", "j2", "j3", "j4"]
    first = store.list_jobs(NS, limit=2)
    assert len(first.items) == 2 and first.next is not None
    rest = store.list_jobs(NS, limit=10, continue_from=first.next)
    assert len(rest.items) == 3 and rest.next is None


def test_watch__object_leaving_the_selection_arrives_deleted() -> None:
    store = MemoryApi(watch_seconds=1.0)
    store.create_job(NS, job_manifest("a"))
    rv = store.list_jobs(NS).resource_version
    events: list[tuple[str, str]] = []

    def watch() -> None:
        for e in store.watch_jobs(NS, rv, Selector(fields="status.phase=Queued")):
            events.append((e.type, e.object["metadata"]["name"]))

    t = threading.Thread(target=watch)
    t.start()
    store.create_job(NS, job_manifest("b"))
    store.patch_job_status(NS, "a", None, claim_patch())
    t.join()
    assert events == [("ADDED", "b"), ("DELETED", "a")]


def test_fault__applied_then_answer_lost() -> None:
    store = MemoryApi()
    store.create_job(NS, job_manifest("a"))
    store.inject(Fault("patch_job_status", Unavailable("reset", maybe_applied=True), applied=True))
    with pytest.raises(Unavailable):
        store.patch_job_status(NS, "a", None, claim_patch())
    job = store.get_job(NS, "a")
    assert job is not None and job.status.phase == "Leased"


def test_config_map__one_mebibyte_at_most() -> None:
    store = MemoryApi()
    store.create_config_map(NS, "ok", {"a": "x" * 1000}, labels={})
    with pytest.raises(Invalid, match="Too long"):
        store.create_config_map(NS, "big", {"a": "x" * (1024 * 1024 + 1)}, labels={})
    with pytest.raises(Conflict):
        store.create_config_map(NS, "ok", {}, labels={})


def test_json_patch__of_the_status_subresource_and_a_failed_test_changes_nothing() -> None:
    from recall.kube.verbs import JOBS

    store = MemoryApi()
    store.create_job(NS, job_manifest("a"))
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/status/phase", "value": "Queued"}]
    ops.append({"op": "add", "path": "/status/offer", "value": {"worker": "w1"}})
    out = store.verbs.patch(JOBS, NS, "a", ops, subresource="status")
    assert out["status"]["offer"] == {"worker": "w1"}
    with pytest.raises(Invalid):
        store.verbs.patch(JOBS, NS, "a", [{"op": "test", "path": "/status/phase", "value": "x"}])
    assert store.get_job(NS, "a") == TranscriptionJob.from_api(out)


def test_scale__reads_the_deployment_and_a_stale_version_conflicts() -> None:
    store = MemoryApi()
    store.put_deployment(NS, "workers", 2, {"app": "w"})
    scale = store.get_scale(NS, "workers")
    assert scale is not None and (scale.replicas, scale.selector) == (2, "app=w")
    assert store.patch_scale(NS, "workers", 5, scale.resource_version).replicas == 5
    with pytest.raises(Conflict):
        store.patch_scale(NS, "workers", 1, scale.resource_version)
    deployment = store.get_deployment(NS, "workers")
    assert deployment is not None and deployment["spec"]["replicas"] == 5
