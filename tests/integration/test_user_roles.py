"""The chart's user roles, aggregated into Kubernetes' view, edit and admin, on the real API
server: users bound to `edit` or `admin` in a namespace submit, suspend and cancel Batches and
jobs; `view` reads them; nobody writes a status subresource; a user bound to nothing does
nothing. Every request is a real one, made as an impersonated user (the kube-controller-manager
of the control plane runs the clusterrole-aggregation controller that fills those roles)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from recall.resources import BATCH_PLURAL, GROUP, JOB_PLURAL, VERSION
from recall_dev.cluster import ControlPlane, tools_bin_dir
from tests.helpers import batch_manifest, job_manifest, wait_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RELEASE = "roles"  # its own names: the chart tests apply the chart's RBAC as release "rc"


def _helm(control_plane: ControlPlane, home: Path, *args: str) -> str:
    out = subprocess.run(
        [str((control_plane.bin_dir or tools_bin_dir(build=False)) / "helm"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**control_plane.env(), "HELM_CACHE_HOME": str(home), "HELM_CONFIG_HOME": str(home)},
    )
    return out.stdout


@pytest.fixture(scope="module")
def user_roles(
    api: client.ApiClient, control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[str]]:
    """The chart's user ClusterRoles, applied; deleted afterwards."""
    rendered = _helm(
        control_plane,
        tmp_path_factory.mktemp("helm"),
        "template",
        RELEASE,
        str(ROOT / "charts" / "recall"),
        "--show-only",
        "templates/user-roles.yaml",
    )
    rbac = client.RbacAuthorizationV1Api(api)
    roles = [d for d in yaml.safe_load_all(rendered) if d]
    for role in roles:
        rbac.create_cluster_role(role)
    try:
        yield [r["metadata"]["name"] for r in roles]
    finally:
        for role in roles:
            rbac.delete_cluster_role(role["metadata"]["name"])


def _aggregated(api: client.ApiClient, role: str, verb: str) -> bool:
    rules = client.RbacAuthorizationV1Api(api).read_cluster_role(role).rules or []
    return any(
        GROUP in (r.api_groups or []) and "batches" in (r.resources or []) and verb in r.verbs
        for r in rules
    )


def as_user(api: client.ApiClient, user: str) -> client.CustomObjectsApi:
    """The custom-objects API of an impersonated user (the admin's client, Impersonate-User)."""
    impersonated = client.ApiClient(
        api.configuration, header_name="Impersonate-User", header_value=user
    )
    return client.CustomObjectsApi(impersonated)


def bind(api: client.ApiClient, namespace: str, user: str, cluster_role: str) -> None:
    client.RbacAuthorizationV1Api(api).create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": f"{user}-{cluster_role}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": cluster_role,
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )


def status_of(call: Callable[..., Any], *args: Any) -> int:
    try:
        call(*args)
    except ApiException as e:
        return int(e.status)
    return 200


def test_user_roles__aggregate_into_view_edit_and_admin(
    api: client.ApiClient, user_roles: list[str]
) -> None:
    assert sorted(user_roles) == [f"{RELEASE}-recall-edit", f"{RELEASE}-recall-view"]
    for role, verb in (("view", "list"), ("edit", "create"), ("edit", "list"), ("admin", "delete")):
        wait_for(
            lambda r=role, w=verb: _aggregated(api, r, w),  # type: ignore[misc]
            timeout=60,
            message=f"{verb} batches in {role}",
        )
    assert not _aggregated(api, "view", "create")


def test_user_roles__editors_submit_and_cancel_viewers_read_nobody_writes_status(
    api: client.ApiClient, namespace: str, user_roles: list[str]
) -> None:
    wait_for(
        lambda: _aggregated(api, "edit", "create"), timeout=60, message="the aggregated edit role"
    )
    wait_for(
        lambda: _aggregated(api, "admin", "create"), timeout=60, message="the aggregated admin role"
    )
    for user, role in (("alice", "edit"), ("carol", "admin"), ("bob", "view")):
        bind(api, namespace, user, role)
    ns, g, v = namespace, GROUP, VERSION
    results: dict[tuple[str, str], int] = {}
    for user in ("alice", "carol", "bob", "dave"):
        u = as_user(api, user)
        batch, job = f"b-{user}", f"j-{user}"
        on = (g, v, ns)
        results[user, "create batch"] = status_of(
            u.create_namespaced_custom_object, *on, BATCH_PLURAL, batch_manifest(batch, ["a"])
        )
        results[user, "create job"] = status_of(
            u.create_namespaced_custom_object, *on, JOB_PLURAL, job_manifest(job)
        )
        target = batch if results[user, "create batch"] == 200 else "b-alice"
        target_job = job if results[user, "create job"] == 200 else "j-alice"
        actions: dict[str, tuple[Callable[..., Any], tuple[Any, ...]]] = {
            "list batches": (u.list_namespaced_custom_object, (BATCH_PLURAL,)),
            "get job": (u.get_namespaced_custom_object, (JOB_PLURAL, target_job)),
            "suspend batch": (
                u.patch_namespaced_custom_object,
                (BATCH_PLURAL, target, {"spec": {"suspend": True}}),
            ),
            "patch batch status": (
                u.patch_namespaced_custom_object_status,
                (BATCH_PLURAL, target, {"status": {"heals": 9}}),
            ),
            "patch job status": (
                u.patch_namespaced_custom_object_status,
                (JOB_PLURAL, target_job, {"status": {"lastError": {"reason": "X"}}}),
            ),
            "cancel job": (u.delete_namespaced_custom_object, (JOB_PLURAL, target_job)),
            "cancel batch": (u.delete_namespaced_custom_object, (BATCH_PLURAL, target)),
        }
        for action, (call, args) in actions.items():
            results[user, action] = status_of(call, *on, *args)
    editor = {
        "create batch": 200,
        "create job": 200,
        "list batches": 200,
        "get job": 200,
        "suspend batch": 200,
        "patch batch status": 403,
        "patch job status": 403,
        "cancel job": 200,
        "cancel batch": 200,
    }
    # bob's reads and writes aim at alice's objects, already cancelled by then: 404 on reads.
    viewer = {a: 403 for a in editor} | {"list batches": 200, "get job": 404}
    nobody = dict.fromkeys(editor, 403)
    expected = {"alice": editor, "carol": editor, "bob": viewer, "dave": nobody}
    assert {k: r for k, r in results.items()} == {
        (user, action): code for user, table in expected.items() for action, code in table.items()
    }
