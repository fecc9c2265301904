"""The operator against an API server that does not serve its resources yet: it says so and
exits, or it waits and then serves the Batches (kopf resolves its resources only once)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from recall.kube.client import KubeClient, load_api_client
from recall.resources import GROUP, JOB_PLURAL, VERSION
from recall_dev.cluster import ControlPlane
from recall_dev.crds import install_crds
from tests.helpers import Procs, create_batch, wait_for

NAMESPACE = "discovery"


@pytest.fixture
def bare_plane() -> Iterator[ControlPlane]:
    """A control plane of this test alone, without the project's CRDs."""
    cp = ControlPlane(controller_manager=False)
    cp.start(timeout=180)
    try:
        yield cp
    finally:
        cp.stop()


def test_operator__waits_for_its_crds_and_then_serves_batches(
    bare_plane: ControlPlane, store_env: dict[str, str], bucket: str, tmp_path: Path
) -> None:
    env = {**bare_plane.env(), **store_env, "PYTHONUNBUFFERED": "1"}
    env["RECALL_STORE_URL"] = f"s3://{bucket}/"
    env["RECALL_LOG_FORMAT"] = "json"
    procs = Procs(env=env, logs=tmp_path / "logs")
    api = load_api_client(bare_plane.kubeconfig)
    kube = KubeClient(api)
    client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
    try:
        impatient = procs.recall(
            "impatient",
            "operator",
            "--namespace",
            NAMESPACE,
            env={"RECALL_OPERATOR_DISCOVERY_SECONDS": "2"},
        )
        rc = impatient.wait(timeout=60)
        said = impatient.log.read_text()
        assert rc != 0, said
        assert f"does not serve {GROUP}/{VERSION} batches, transcriptionjobs" in said, said
        assert "are the CRDs installed?" in said, said

        patient = procs.recall("patient", "operator", "--namespace", NAMESPACE)
        wait_for(
            lambda: "waiting_for_resources" in patient.event_names(),
            timeout=60,
            message=procs.dump,
        )
        install_crds(api=api)
        create_batch(kube, NAMESPACE, "late", ["a", "b", "c"])
        wait_for(
            lambda: len(kube.list_jobs(NAMESPACE).items) == 3,
            timeout=60,
            message=procs.dump,
        )
        assert patient.alive(), procs.dump()
        jobs = kube.custom.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, JOB_PLURAL)
        assert sorted(j["spec"]["item"] for j in jobs["items"]) == ["a", "b", "c"]

        # A SIGTERM stops it in well under a second: neither the informers' watches nor
        # kopf's waiter on the operator's own stop flag hold it (8 s is a generous bound).
        patient.signal(signal.SIGTERM)
        assert patient.wait(timeout=8) == 0, procs.dump()
        assert "threads_not_stopped" not in patient.event_names(), procs.dump()
    finally:
        procs.kill_all()
