"""Malformed manifests and forbidden status transitions are rejected by the API server itself,
with a message that names the field."""

from __future__ import annotations

import copy
import datetime as dt
import subprocess
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from recall.kube.client import KubeClient as Kube
from recall.kube.client import api_message
from recall.resources import API_VERSION, BATCH_PLURAL, GROUP, JOB_PLURAL, VERSION
from recall_dev.cluster import ControlPlane
from tests.helpers import create_job, merge_patch

JOB: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": "TranscriptionJob",
    "metadata": {"name": "bad"},
    "spec": {"source": {"url": "file:///media/a.wav"}},
}
BATCH: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": "Batch",
    "metadata": {"name": "bad"},
    "spec": {"items": [{"key": "a", "source": {"url": "file:///media/a.wav"}}]},
}


def with_spec(base: dict[str, Any], **spec: Any) -> dict[str, Any]:
    out = copy.deepcopy(base)
    out["spec"].update(spec)
    return out


def item(key: str, url: str = "file:///media/x.wav") -> dict[str, Any]:
    return {"key": key, "source": {"url": url}}


BAD: list[tuple[str, str, dict[str, Any], str]] = [
    (
        "job-ftp-url",
        JOB_PLURAL,
        with_spec(JOB, source={"url": "ftp://host/a.wav"}),
        "spec.source.url",
    ),
    (
        "job-url-with-space",
        JOB_PLURAL,
        with_spec(JOB, source={"url": "file:///a b.wav"}),
        "spec.source.url",
    ),
    ("job-no-source", JOB_PLURAL, {**JOB, "spec": {"language": "en"}}, "spec.source"),
    (
        "job-negative-lease",
        JOB_PLURAL,
        with_spec(JOB, leaseDurationSeconds=-1),
        "spec.leaseDurationSeconds",
    ),
    ("job-zero-attempts", JOB_PLURAL, with_spec(JOB, maxAttempts=0), "spec.maxAttempts"),
    ("job-priority-too-high", JOB_PLURAL, with_spec(JOB, priority=5000), "spec.priority"),
    ("job-language-word", JOB_PLURAL, with_spec(JOB, language="English"), "spec.language"),
    ("job-unknown-engine", JOB_PLURAL, with_spec(JOB, engine={"name": "gpt"}), "spec.engine.name"),
    (
        "job-zero-chunks",
        JOB_PLURAL,
        with_spec(JOB, engine={"simulate": {"chunks": 0}}),
        "spec.engine.simulate.chunks",
    ),
    (
        "job-chunk-too-short",
        JOB_PLURAL,
        with_spec(JOB, engine={"chunkSeconds": 1}),
        "spec.engine.chunkSeconds",
    ),
    ("batch-no-items", BATCH_PLURAL, with_spec(BATCH, items=[]), "spec.items"),
    (
        "batch-too-many-items",
        BATCH_PLURAL,
        with_spec(BATCH, items=[item(f"i{i}") for i in range(1001)]),
        "spec.items",
    ),
    (
        "batch-duplicate-keys",
        BATCH_PLURAL,
        with_spec(BATCH, items=[item("a"), item("a")]),
        "spec.items[1]",
    ),
    (
        "batch-bad-key",
        BATCH_PLURAL,
        with_spec(BATCH, items=[item("Not_A_Label")]),
        "spec.items[0].key",
    ),
    (
        "batch-item-bad-url",
        BATCH_PLURAL,
        with_spec(BATCH, items=[item("a", "ftp://b/k")]),
        "spec.items[0].source.url",
    ),
    (
        "batch-inline-items-too-large",
        BATCH_PLURAL,
        with_spec(BATCH, items=[item(f"i{i}", "https://media/" + "x" * 1990) for i in range(80)]),
        "put them in lists named by spec.itemsFrom",
    ),
    (
        "batch-more-than-1000-inline-items",
        BATCH_PLURAL,
        with_spec(BATCH, items=[item(f"i{i}", f"https://m/{i}.wav") for i in range(1500)]),
        "list the items in ConfigMaps named by spec.itemsFrom",
    ),
    (
        "job-output-with-an-unknown-scheme",
        JOB_PLURAL,
        {**JOB, "spec": {**JOB["spec"], "output": {"url": "ftp://media-out/talks/{key}"}}},
        "spec.output.url",
    ),
    (
        "job-output-with-an-unknown-format",
        JOB_PLURAL,
        {
            **JOB,
            "spec": {**JOB["spec"], "output": {"url": "s3://out/{key}", "formats": ["docx"]}},
        },
        "spec.output.formats[0]",
    ),
    (
        "batch-empty-item-list-reference",
        BATCH_PLURAL,
        with_spec(BATCH, itemsFrom=[{"key": "items"}]),
        "spec.itemsFrom[0].configMap",
    ),
    (
        "batch-zero-lease",
        BATCH_PLURAL,
        with_spec(BATCH, defaults={"leaseDurationSeconds": 0}),
        "spec.defaults.leaseDurationSeconds",
    ),
]


@pytest.mark.parametrize(("case", "plural", "body", "field"), BAD, ids=[b[0] for b in BAD])
def test_malformed_manifest__rejected_naming_the_field(
    kube: Kube, namespace: str, case: str, plural: str, body: dict[str, Any], field: str
) -> None:
    with pytest.raises(ApiException) as e:
        kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body)
    assert e.value.status == 422, case
    assert field in api_message(e.value), api_message(e.value)


def test_job_spec__is_immutable(kube: Kube, namespace: str) -> None:
    create_job(kube, namespace, "j")
    with pytest.raises(ApiException) as e:
        merge_patch(kube, namespace, JOB_PLURAL, "j", {"spec": {"priority": 7}})
    assert e.value.status == 422
    assert "spec is immutable" in api_message(e.value)


def test_batch_items__are_immutable_but_suspend_is_not(kube: Kube, namespace: str) -> None:
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, BATCH_PLURAL, BATCH)
    merge_patch(kube, namespace, BATCH_PLURAL, "bad", {"spec": {"suspend": True}})
    with pytest.raises(ApiException) as e:
        merge_patch(kube, namespace, BATCH_PLURAL, "bad", {"spec": {"items": [item("b")]}})
    assert "spec.items is immutable" in api_message(e.value)


@pytest.mark.parametrize(
    ("kind", "plural"), [("Batch", BATCH_PLURAL), ("TranscriptionJob", JOB_PLURAL)]
)
def test_object_without_spec__is_refused(
    kube: Kube, namespace: str, kind: str, plural: str
) -> None:
    """Without a spec no rule of the spec would be checked, and `recall get` could not read it."""
    body = {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": "oops"}}
    with pytest.raises(ApiException) as e:
        kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body)
    assert e.value.status == 422
    assert "spec: Required value" in api_message(e.value), api_message(e.value)


def test_job_spec__cannot_be_removed_or_given_a_field_it_lacked(kube: Kube, namespace: str) -> None:
    create_job(kube, namespace, "j")
    patches: list[tuple[dict[str, Any], str]] = [
        ({"spec": None}, "spec: Required value"),
        ({"spec": {"language": "en"}}, "spec is immutable"),
    ]
    for patch, words in patches:
        with pytest.raises(ApiException) as e:
            merge_patch(kube, namespace, JOB_PLURAL, "j", patch)
        assert e.value.status == 422 and words in api_message(e.value), api_message(e.value)


LIST = [{"configMap": "talks-items-1", "key": "items"}]
FULL = with_spec(BATCH, itemsFrom=LIST, defaults={"language": "en"})
# (created with, patch of spec, the immutable field it breaks): each added or removed
IMMUTABLE_CHANGES = [
    ("add-items", with_spec(FULL, items=None), {"items": [item("b")]}, "spec.items"),
    ("remove-items", FULL, {"items": None}, "spec.items"),
    ("add-items-from", with_spec(FULL, itemsFrom=None), {"itemsFrom": LIST}, "spec.itemsFrom"),
    ("remove-items-from", FULL, {"itemsFrom": None}, "spec.itemsFrom"),
    (
        "add-defaults",
        with_spec(FULL, defaults=None),
        {"defaults": {"priority": 5}},
        "spec.defaults",
    ),
    ("remove-defaults", FULL, {"defaults": None}, "spec.defaults"),
    ("change-defaults", FULL, {"defaults": {"language": "de"}}, "spec.defaults"),
]


@pytest.mark.parametrize(
    ("case", "created", "patch", "field"), IMMUTABLE_CHANGES, ids=[c[0] for c in IMMUTABLE_CHANGES]
)
def test_batch_immutable_fields__cannot_be_added_removed_or_changed(
    kube: Kube, namespace: str, case: str, created: dict[str, Any], patch: Any, field: str
) -> None:
    body = copy.deepcopy(created)
    body["spec"] = {k: v for k, v in body["spec"].items() if v is not None}
    spec = kube.custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, BATCH_PLURAL, body
    )["spec"]
    with pytest.raises(ApiException) as e:
        merge_patch(kube, namespace, BATCH_PLURAL, "bad", {"spec": patch})
    assert e.value.status == 422, case
    assert f"{field} is immutable" in api_message(e.value), api_message(e.value)
    suspended = merge_patch(kube, namespace, BATCH_PLURAL, "bad", {"spec": {"suspend": True}})
    assert suspended["spec"] == {**spec, "suspend": True}, "suspend still changes"


def test_batch_eta__kubectl_prints_the_time_to_come(
    control_plane: ControlPlane, kube: Kube, namespace: str
) -> None:
    """kubectl prints a date column as the time since it ("<invalid>" for a time to come): the
    ETA column is the RFC 3339 time itself."""
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, BATCH_PLURAL, BATCH)
    eta = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    kube.custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, BATCH_PLURAL, "bad", {"status": {"eta": eta}}
    )
    assert control_plane.bin_dir is not None
    out = subprocess.run(
        [str(control_plane.bin_dir / "kubectl"), "get", "rb", "bad", "-n", namespace],
        env=control_plane.env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    header, row = out.stdout.splitlines()
    assert row[header.index("ETA") :].split()[0] == eta, out.stdout  # empty cells print blank
