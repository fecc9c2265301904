"""The API server semantics the lease protocol stands on, proven against the real kube-apiserver."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from recall.kube import Invalid, Selector
from recall.kube.client import MERGE_PATCH, api_message
from recall.kube.client import KubeClient as Kube
from recall.resources import GROUP, JOB_PLURAL, VERSION
from recall_dev.cluster import ControlPlane
from tests.helpers import create_job, get_job, merge_patch, refused_with, wait_for
from tests.rbac import service_account_client


def patch_status(kube: Kube, ns: str, name: str, body: dict[str, object]) -> dict[str, object]:
    out: dict[str, object] = kube.custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, ns, JOB_PLURAL, name, body, _content_type=MERGE_PATCH
    )
    return out


def test_control_plane__is_ready_and_real(control_plane: ControlPlane) -> None:
    assert control_plane.get_raw("/readyz") == "ok"
    assert '"gitVersion": "v1.37' in control_plane.get_raw("/version")


def test_status_patch__with_stale_resource_version_gets_409(kube: Kube, namespace: str) -> None:
    job = create_job(kube, namespace, "j")
    stale = job.resource_version
    patch_status(
        kube, namespace, "j", {"metadata": {"resourceVersion": stale}, "status": {"failures": 1}}
    )
    with pytest.raises(ApiException) as e:
        patch_status(
            kube,
            namespace,
            "j",
            {"metadata": {"resourceVersion": stale}, "status": {"failures": 2}},
        )
    assert e.value.status == 409
    assert get_job(kube, namespace, "j").status.failures == 1


def test_status_patch__with_current_resource_version_applies(kube: Kube, namespace: str) -> None:
    job = create_job(kube, namespace, "j")
    out = patch_status(
        kube,
        namespace,
        "j",
        {"metadata": {"resourceVersion": job.resource_version}, "status": {"failures": 1}},
    )
    assert out["metadata"]["resourceVersion"] != job.resource_version  # type: ignore[index]


def test_status_patch__cannot_change_labels_annotations_or_spec(kube: Kube, namespace: str) -> None:
    create_job(kube, namespace, "j", priority=1)
    patch_status(
        kube,
        namespace,
        "j",
        {
            "metadata": {"labels": {"sneaky": "yes"}, "annotations": {"sneaky": "yes"}},
            "spec": {"priority": 999},
            "status": {"failures": 1},
        },
    )
    job = get_job(kube, namespace, "j")
    assert job.status.failures == 1
    assert "sneaky" not in job.metadata.labels
    assert "sneaky" not in job.metadata.annotations
    assert job.spec.priority == 1


def test_main_resource_update__cannot_change_status(kube: Kube, namespace: str) -> None:
    create_job(kube, namespace, "j")
    change = {"metadata": {"labels": {"a": "b"}}, "status": {"phase": "Succeeded"}}
    merge_patch(kube, namespace, JOB_PLURAL, "j", change)
    job = get_job(kube, namespace, "j")
    assert job.metadata.labels["a"] == "b"
    assert job.status.phase == "Queued"


def test_new_job__reads_as_queued_and_is_selectable_by_phase(kube: Kube, namespace: str) -> None:
    create_job(kube, namespace, "a")
    create_job(kube, namespace, "b")
    patch_status(kube, namespace, "b", {"status": {"phase": "Cancelled"}})
    queued = kube.list_jobs(namespace, Selector(fields="status.phase=Queued")).items
    assert [j["metadata"]["name"] for j in queued] == ["a"]


def test_crd_schema__rejects_a_bad_object_with_a_clear_message(kube: Kube, namespace: str) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TranscriptionJob",
        "metadata": {"name": "bad"},
        "spec": {"source": {"url": "ftp://x/y.wav"}, "leaseDurationSeconds": -5},
    }
    with pytest.raises(Invalid) as e:
        kube.create_job(namespace, body)
    assert e.value.status == 422
    message = e.value.message
    assert "spec.source.url" in message
    assert "spec.leaseDurationSeconds" in message


def test_rbac__identity_without_binding_is_forbidden_and_with_binding_allowed(
    api: client.ApiClient, kube: Kube, namespace: str, control_plane: ControlPlane
) -> None:
    create_job(kube, namespace, "j")
    rbac = client.RbacAuthorizationV1Api(api)
    sa_api = service_account_client(api, control_plane, namespace, "reader")
    sa_custom = client.CustomObjectsApi(sa_api)

    with pytest.raises(ApiException) as e:
        sa_custom.get_namespaced_custom_object(GROUP, VERSION, namespace, JOB_PLURAL, "j")
    assert e.value.status == 403
    assert f"system:serviceaccount:{namespace}:reader" in api_message(e.value)

    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "reader"},
            "rules": [{"apiGroups": [GROUP], "resources": [JOB_PLURAL], "verbs": ["get"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    )

    # RBAC changes reach the authorizer's cache within moments.
    def read() -> object:
        return sa_custom.get_namespaced_custom_object(GROUP, VERSION, namespace, JOB_PLURAL, "j")

    wait_for(
        lambda: not refused_with(403, read), timeout=10, message="the RoleBinding to take effect"
    )
