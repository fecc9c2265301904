"""The chart installed with Helm on a real node, for the pod end-to-end tests (`make e2e`).

Two kinds of cluster run these tests unchanged:
- **node** (the default): the image is built from the Dockerfile (recall_dev.image), a control
  plane and a node start here (recall_dev.cluster, recall_dev.node: containerd, kubelet,
  scheduler, an isolated pod network whose guard must pass first), the image is imported into
  the node's containerd, and the speech files live in a directory the workers mount with
  hostPath. Needs root (containerd, iptables, cgroups): without it the tests fail, they do not
  skip.
- **kind** (`RECALL_E2E_CLUSTER=kind`, `make e2e-kind`): a kind cluster (recall_dev.kind) on
  the node image built here (or `KIND_NODE_IMAGE`), named `RECALL_KIND_CLUSTER` (default
  recall-e2e), the media directory mounted at the same path in its node, deleted at the end
  with its docker network.
Both load every image of `image_archives()`.

The release is installed once per package (`helm install --wait`) and shared by the tests in
test_pods.py, which run in file order; the last one uninstalls it. Everything this file starts
is stopped at the end of the package, whatever happened: the node's teardown removes
containers, mounts, cgroups, the bridge and NAT rules.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from recall.base.settings import WorkerSettings
from recall.kube.store import KubeStore as Kube
from recall.kube.store import load_api_client

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "recall"
VALUES = Path(__file__).with_name("values.yaml")
NAMESPACE = "recall"
RELEASE = "recall"
IMAGE_REPOSITORY = "recall.local/recall"
IMAGE_TAG = "dev"
# The bundled results store's image, built here from the weed binary (recall_dev.objstore_image).
STORE_REPOSITORY = "recall.local/seaweedfs"
STORE_TAG = "e2e"
STORE_IMAGE = f"{STORE_REPOSITORY}:{STORE_TAG}"
STORE_UID = 65532  # the store image's user


@dataclass
class PodCluster:
    """A cluster with one or more nodes that run the project's image, and its tools."""

    flavour: str
    kubeconfig: Path
    bin_dir: Path
    media_dir: Path
    kill_container: Callable[[str], None]
    env: dict[str, str] = field(default_factory=dict)
    store_dir: Path | None = None  # the bundled store's data on the node; None: an emptyDir

    def run(
        self, tool: str, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, **self.env, "KUBECONFIG": str(self.kubeconfig)}
        done = subprocess.run(
            [str(self.bin_dir / tool), *args], input=stdin, capture_output=True, text=True, env=env
        )
        if check and done.returncode != 0:
            raise AssertionError(f"{tool} {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
        return done

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        return self.run("kubectl", *args, stdin=stdin).stdout

    def helm(self, *args: str) -> str:
        return self.run("helm", *args, "--namespace", NAMESPACE).stdout

    def pods(self, component: str) -> list[dict[str, Any]]:
        """The pods of one chart component (operator or worker), running or not."""
        out = self.kubectl(
            "get", "pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/component={component}",
            "-o", "json",
        )  # fmt: skip
        items: list[dict[str, Any]] = json.loads(out)["items"]
        return items


def image_archives() -> list[Path]:
    """The images the pods run, built here, as archives a node imports: every cluster loads
    each one (another image is one more line here)."""
    from recall_dev import objstore_image
    from recall_dev.image import build_and_save

    return [
        build_and_save(f"{IMAGE_REPOSITORY}:{IMAGE_TAG}"),
        objstore_image.build_and_save(STORE_IMAGE),
    ]


def _local_cluster(tmp: Path, failed: Callable[[], bool]) -> Iterator[PodCluster]:
    from recall_dev.cluster import ControlPlane
    from recall_dev.node import Node
    from recall_dev.node_images import import_archive

    if os.geteuid() != 0:
        pytest.fail("the pod end-to-end tests start containerd and a kubelet: run them as root")
    archives = image_archives()
    # Under pytest's temporary directory: even a killed run leaves nothing elsewhere (the
    # node's reaper removes what the node made outside it).
    cp = ControlPlane(workdir=tmp / "control-plane")
    cp.start(timeout=180)
    node = Node(cp, tmp / "node")
    try:
        # Another test run's node may hold the machine: take turns (one run takes minutes).
        node.start(wait_for_machine=900)
        for archive in archives:
            import_archive(node.containerd_socket, archive)
        assert cp.bin_dir is not None
        socket = node.containerd_socket

        def kill_container(container_id: str) -> None:
            subprocess.run(
                ["ctr", "--address", str(socket), "-n", "k8s.io", "tasks", "kill",
                 "--signal", "SIGKILL", container_id],
                check=True, capture_output=True,
            )  # fmt: skip

        media = tmp / "media"
        media.mkdir()
        media.chmod(0o755)
        # The node is this machine: the bundled store keeps its data in a directory here (no
        # volume provisioner on this node), writable by the store's user only.
        store = tmp / "store"
        store.mkdir(mode=0o700)
        os.chown(store, STORE_UID, STORE_UID)
        yield PodCluster("node", cp.kubeconfig, cp.bin_dir, media, kill_container, store_dir=store)
    finally:
        node.stop()
        kept = cp.stop(keep_logs=failed())
        if kept:
            print(f"\ncontrol plane logs of the failed pod tests kept in {kept}")


def _kind_cluster(tmp: Path, name: str = "") -> Iterator[PodCluster]:
    from recall_dev.kind import kind_cluster

    media = tmp / "media"
    media.mkdir()
    media.chmod(0o755)
    name = name or os.environ.get("RECALL_KIND_CLUSTER", "recall-e2e")
    with kind_cluster(name, tmp / "kind", archives=image_archives(), mounts=[media]) as kind:
        yield PodCluster("kind", kind.kubeconfig, kind.bin_dir, media, kind.kill_container)


_failures: list[str] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    report = yield
    if getattr(report, "failed", False) and "e2e/pods" in item.nodeid:
        _failures.append(item.nodeid)
    return report


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodCluster]:
    # A short path: containerd's sockets live under it (108 bytes at most).
    tmp = tmp_path_factory.mktemp("pods", numbered=True)
    if os.environ.get("RECALL_E2E_CLUSTER", "node") == "kind":
        yield from _kind_cluster(tmp)
    else:
        yield from _local_cluster(tmp, lambda: bool(_failures))


@pytest.fixture(scope="package")
def kube(cluster: PodCluster) -> Kube:
    return Kube(load_api_client(cluster.kubeconfig))


@pytest.fixture(scope="package")
def api(cluster: PodCluster) -> client.ApiClient:
    return load_api_client(cluster.kubeconfig)


def release_values(cluster: PodCluster) -> list[str]:
    """helm arguments: values.yaml, the media directory, and what this runtime supports."""
    args = ["--values", str(VALUES)]
    media = {"hostPath": {"path": str(cluster.media_dir), "type": "Directory"}}
    args += ["--set-json", f"worker.mediaVolume={json.dumps(media)}"]
    store: dict[str, Any] = {
        "image": {"repository": STORE_REPOSITORY, "tag": STORE_TAG, "pullPolicy": "Never"},
        "persistence": {"enabled": cluster.store_dir is not None},
    }
    if cluster.store_dir is not None:
        store["persistence"]["hostPath"] = str(cluster.store_dir)
    args += ["--set-json", f"store.bundled={json.dumps(store)}"]
    # The image is built from this checkout: it serves the worker health endpoint only if
    # this checkout's worker settings have it. Without it the probes would restart workers.
    if "health_port" not in WorkerSettings.model_fields:
        args += ["--set", "worker.health.port=0"]
    return args


@pytest.fixture(scope="package")
def release(cluster: PodCluster) -> Iterator[str]:
    """The chart installed (and ready) in the namespace `recall`; uninstalled at the end."""
    cluster.helm(
        "install", RELEASE, str(CHART), "--create-namespace", *release_values(cluster),
        "--wait", "--timeout", "5m",
    )  # fmt: skip
    try:
        yield RELEASE
    finally:
        if _failures:
            diagnostics(cluster)
        cluster.run("helm", "uninstall", RELEASE, "--namespace", NAMESPACE, check=False)


def diagnostics(cluster: PodCluster) -> None:
    """Print what helps to understand a failure: pods, jobs, events, logs."""
    for args in (
        ("get", "pods,batches,transcriptionjobs", "-n", NAMESPACE, "-o", "wide"),
        ("get", "events", "-n", NAMESPACE, "--sort-by=.lastTimestamp"),
        ("logs", "-n", NAMESPACE, "-l", "app.kubernetes.io/part-of=recall", "--prefix",
         "--tail=60", "--all-containers"),
    ):  # fmt: skip
        done = cluster.run("kubectl", *args, check=False)
        print(f"\n$ kubectl {' '.join(args)}\n{done.stdout[-6000:]}{done.stderr[-2000:]}")
