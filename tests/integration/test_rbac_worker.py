"""A worker identity with least privilege can do its whole job and nothing more: read jobs,
write their status (a claim updates it, the other lease writes patch it), nothing on
ConfigMaps (the work's bytes are in the object store, where the worker's own identity reaches
only the scratch prefix)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from recall.bucket import Bucket
from recall.kube.client import MERGE_PATCH
from recall.kube.client import KubeClient as Kube
from recall.resources import BATCH_PLURAL, GROUP, JOB_PLURAL, VERSION, Phase
from recall_dev.cluster import ControlPlane
from tests.helpers import Procs, create_job, get_job, job_manifest, manifest, wait_for_phase
from tests.rbac import service_account_client, service_account_token, token_kubeconfig

WORKER_RULES = [
    {"apiGroups": [GROUP], "resources": [JOB_PLURAL], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [GROUP], "resources": [f"{JOB_PLURAL}/status"], "verbs": ["patch", "update"]},
]


def bind_worker_role(api: client.ApiClient, namespace: str, sa: str) -> None:
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "worker"}, "rules": WORKER_RULES})
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "worker"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "worker"},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}],
        },
    )


def test_least_privilege_worker__does_its_job_and_nothing_more(
    api: client.ApiClient,
    kube: Kube,
    namespace: str,
    control_plane: ControlPlane,
    procs: Procs,
    results: Bucket,
    tmp_path: Path,
) -> None:
    bind_worker_role(api, namespace, "worker")
    token = service_account_token(api, namespace, "worker")
    kubeconfig = token_kubeconfig(
        control_plane,
        token,
        tmp_path / "worker.kubeconfig",
        namespace,
        f"system:serviceaccount:{namespace}:worker",
    )
    create_job(kube, namespace, "j1", simulate={"chunks": 3, "chunkDelaySeconds": 0.05})

    w = procs.worker(
        "w", "--engine", "simulated", "--max-jobs", "1", env={"KUBECONFIG": str(kubeconfig)}
    )
    wait_for_phase(kube, namespace, "j1", Phase.SUCCEEDED, timeout=30, procs=procs)
    assert w.wait(timeout=20) == 0
    job = get_job(kube, namespace, "j1")
    assert job.status.result is not None
    assert results.get(job.status.result.transcript) is not None

    as_worker = client.CustomObjectsApi(
        service_account_client(api, control_plane, namespace, "worker")
    )
    forbidden: dict[str, Callable[[], object]] = {
        "change a job's spec": lambda: as_worker.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            JOB_PLURAL,
            "j1",
            {"spec": {"priority": 9}},
            _content_type=MERGE_PATCH,
        ),
        "create a job": lambda: as_worker.create_namespaced_custom_object(
            GROUP, VERSION, namespace, JOB_PLURAL, job_manifest("mine")
        ),
        "delete a job": lambda: as_worker.delete_namespaced_custom_object(
            GROUP, VERSION, namespace, JOB_PLURAL, "j1"
        ),
        "read a Batch": lambda: as_worker.list_namespaced_custom_object(
            GROUP, VERSION, namespace, BATCH_PLURAL
        ),
        "create a Batch": lambda: as_worker.create_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            BATCH_PLURAL,
            manifest("Batch", "b", {"items": [{"key": "a", "source": {"url": "file:///a.wav"}}]}),
        ),
        "read Secrets": lambda: client.CoreV1Api(as_worker.api_client).list_namespaced_secret(
            namespace
        ),
        "create a ConfigMap": lambda: client.CoreV1Api(
            as_worker.api_client
        ).create_namespaced_config_map(namespace, {"metadata": {"name": "x"}, "data": {}}),
    }
    for what, call in forbidden.items():
        with pytest.raises(ApiException) as e:
            call()
        assert e.value.status == 403, what
