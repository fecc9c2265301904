"""Shared fixtures: one real control plane per test session, a fresh namespace per test.

The control plane is etcd + kube-apiserver (+ kube-controller-manager) built from Go modules
by hack/k8s-tools/build.sh, started as local processes (`recall_dev.cluster`). If any test
failed, the server logs are copied to a directory printed at the end of the session.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from recall.base.settings import StoreSettings
from recall.bucket import Bucket, Stores
from recall.kube.client import KubeClient, load_api_client
from recall_dev.cluster import ControlPlane
from recall_dev.crds import install_crds
from recall_dev.objstore import ObjectStore
from tests.helpers import Procs

_failed: list[str] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    report = yield
    if getattr(report, "failed", False):
        _failed.append(item.nodeid)
    return report


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    cp = ControlPlane()
    cp.start(timeout=180)
    try:
        install_crds(str(cp.kubeconfig))
        yield cp
    finally:
        kept = cp.stop(keep_logs=bool(_failed))
        if kept:
            print(f"\ncontrol plane logs of the failed session kept in {kept}")


@pytest.fixture(scope="session")
def api(control_plane: ControlPlane) -> client.ApiClient:
    return load_api_client(control_plane.kubeconfig)


@pytest.fixture(scope="session")
def kube(api: client.ApiClient) -> KubeClient:
    """The store on the real API server (`.custom` and `.core` give raw access)."""
    return KubeClient(api)


@pytest.fixture
def namespace(api: client.ApiClient) -> Iterator[str]:
    """A fresh namespace for one test, deleted afterwards."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="session")
def object_store() -> Iterator[ObjectStore]:
    """A real S3 server (SeaweedFS, `recall_dev.objstore`) on loopback for the session."""
    store = ObjectStore()
    store.start()
    try:
        yield store
    finally:
        kept = store.stop(keep_logs=bool(_failed))
        if kept:
            print(f"\nobject store log of the failed session kept in {kept}")


@pytest.fixture
def bucket(object_store: ObjectStore) -> Iterator[str]:
    """A fresh bucket for one test, deleted afterwards with everything in it."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    object_store.create_bucket(name)
    yield name
    object_store.delete_bucket(name)


@pytest.fixture(scope="session")
def store_env(object_store: ObjectStore) -> dict[str, str]:
    """The object store's S3 variables (its admin identity), set in this process too: the
    results stores opened in-process (`recall.bucket.Stores`) read them, as the operator's do."""
    env = object_store.env()
    os.environ.update(env)
    return env


@pytest.fixture
def results(bucket: str, store_env: dict[str, str]) -> Bucket:
    """The results store of one test: a fresh bucket on the real S3 server."""
    return Stores(StoreSettings(url=f"s3://{bucket}/")).results()


@pytest.fixture
def outputs(object_store: ObjectStore, store_env: dict[str, str]) -> Iterator[Bucket]:
    """A second bucket: where the users want their outputs, deleted afterwards."""
    name = f"out-{uuid.uuid4().hex[:12]}"
    object_store.create_bucket(name)
    try:
        yield Stores(StoreSettings(url=f"s3://{name}/")).results()
    finally:
        object_store.delete_bucket(name)


@pytest.fixture
def procs(
    control_plane: ControlPlane,
    object_store: ObjectStore,
    store_env: dict[str, str],
    results: Bucket,
    tmp_path: Path,
) -> Iterator[Procs]:
    """Starts `recall` processes against the control plane and the test's results store
    (workers with the store's scratch-only identity); kills what is left at the end."""
    env = control_plane.env()
    env.update(store_env)
    env["RECALL_STORE_URL"] = results.url
    env.setdefault("RECALL_LOG_FORMAT", "json")
    # Workers serve themselves soon when no operator offers them work (tests without one).
    env.setdefault("RECALL_WORKER_SELF_SERVE_SECONDS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    worker_env = object_store.env(object_store.worker)
    p = Procs(env=env, logs=tmp_path / "logs", worker_env=worker_env)
    try:
        yield p
    finally:
        p.kill_all()


def pytest_configure(config: pytest.Config) -> None:
    # Child processes must find the `tests` package and the source tree.
    root = Path(__file__).resolve().parents[1]
    os.environ.setdefault("RECALL_REPO", str(root))


# The longest files first (rank 0, 1; every other file 2): `make test` hands whole files to two
# processes (pytest-xdist's loadfile, with --no-loadscope-reorder: by default it hands out the
# files with the most tests first), and a long file handed out last would run alone at the end.
# (The short chaos run is not among them: make test runs it afterwards, on its own.)
ORDER = {
    "tests/e2e/test_big_batch.py": 0,
    "tests/e2e/kind/test_kind.py": 1,
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        return ORDER.get(item.nodeid.split("::", 1)[0], 2)

    items.sort(key=rank)  # stable: the order within a file and among the rest is kept
