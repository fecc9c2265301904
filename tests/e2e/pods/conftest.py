"""The chart installed with Helm on a kind cluster of several nodes (`make e2e-kind`).

The cluster (recall_dev.kind, named `RECALL_KIND_CLUSTER`, default recall-e2e) has a control
plane and two worker nodes, all three taking pods; it runs on the node image built here (or
`KIND_NODE_IMAGE`), has the media directory mounted at the same path in every node, and is
deleted at the end with its docker network. Every image the chart's default values name is
built here and loaded into every node under that name (`recall_dev.release.chart_images`:
`recall:<version>` and the bundled store's SeaweedFS), so the releases use the chart's own
image settings, with `pullPolicy: Never` so that nothing is ever pulled.

The modules run in MODULES order (the first installs the CRDs with its release; the others
install theirs without them, and the upgrade test last takes them over). Each module installs
its own release in a namespace of its own and uninstalls it at the end. The bundled store of
every release runs on the control-plane node (its volume is a directory of that node, and the
drills never take that node away).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from recall.base.settings import WorkerSettings
from recall.kube.client import KubeClient as Kube
from recall.kube.client import load_api_client
from recall_dev.kind import KindCluster

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "recall"
VALUES = Path(__file__).with_name("values.yaml")
NAMESPACE = "recall"
RELEASE = "recall"
WORKER_NODES = 2
# A simulated worker's requests and limits: small, so that a node holds several.
SMALL_WORKER: dict[str, Any] = {
    "requests": {"cpu": "100m", "memory": "128Mi", "ephemeral-storage": "64Mi"},
    "limits": {"cpu": "1", "memory": "512Mi", "ephemeral-storage": "256Mi"},
}


def simulated_release(operators: int, workers: int, grace_seconds: int) -> dict[str, Any]:
    """The values of a release of the simulated engine: `operators` operators and `workers`
    small workers with a grace of `grace_seconds`."""
    return {
        "engine": {"name": "simulated"},
        "operator": {"replicas": operators},
        "worker": {"replicas": workers, "graceSeconds": grace_seconds, "resources": SMALL_WORKER},
    }


# One pytest process runs them, in this order (pytest_collection_modifyitems below).
MODULES = (
    "test_pods.py", "test_scaling.py", "test_gpu_pools.py", "test_install.py", "test_drills.py",
    "test_upgrade.py",
)  # fmt: skip


@dataclass
class PodCluster:
    """A kind cluster that runs the project's images, and its tools."""

    kind: KindCluster
    media_dir: Path

    @property
    def kubeconfig(self) -> Path:
        return self.kind.kubeconfig

    @property
    def bin_dir(self) -> Path:
        return self.kind.bin_dir

    def kill_container(self, container_id: str) -> None:
        self.kind.kill_container(container_id)

    def run(
        self, tool: str, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        done = subprocess.run(
            [str(self.bin_dir / tool), *args], input=stdin, capture_output=True, text=True, env=env
        )
        if check and done.returncode != 0:
            raise AssertionError(f"{tool} {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
        return done

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        return self.run("kubectl", *args, stdin=stdin).stdout

    def helm(self, *args: str, namespace: str = NAMESPACE) -> str:
        return self.run("helm", *args, "--namespace", namespace).stdout

    def pods(self, component: str, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
        """The pods of one chart component (operator, worker, store), running or not."""
        out = self.kubectl(
            "get", "pods", "-n", namespace, "-l", f"app.kubernetes.io/component={component}",
            "-o", "json",
        )  # fmt: skip
        items: list[dict[str, Any]] = json.loads(out)["items"]
        return items

    def worker_events(self, namespace: str, pod: str, event: str) -> list[dict[str, Any]]:
        """The JSON log lines of a pod's worker container with this event name."""
        out = self.run("kubectl", "logs", "-n", namespace, pod, "-c", "worker", check=False)
        found = []
        for line in out.stdout.splitlines():
            if f'"{event}"' not in line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("event") == event:
                found.append(record)
        return found


def image_archives() -> list[Path]:
    """The images the chart's defaults name, built here, as archives every node loads."""
    from recall_dev.release import chart_images

    return chart_images()


def kind_cluster(tmp: Path, name: str, workers: int) -> Iterator[PodCluster]:
    from recall_dev.kind import kind_cluster

    media = tmp / "media"
    media.mkdir()
    media.chmod(0o755)
    with kind_cluster(
        name, tmp / "kind", workers=workers, archives=image_archives(), mounts=[media]
    ) as kind:
        yield PodCluster(kind, media)


_failures: list[str] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        name = path.rsplit("/", 1)[-1]
        if "e2e/pods/" not in path:  # after the package: its cluster is made once
            return len(MODULES) + 1
        return MODULES.index(name) if name in MODULES else len(MODULES)

    items.sort(key=rank)  # stable: the order within a module is kept


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and "e2e/pods" in item.nodeid:
        _failures.append(item.nodeid)
        cluster = getattr(item, "funcargs", {}).get("cluster")
        if isinstance(cluster, PodCluster):
            try:  # the cluster as the failure left it, before the next test changes it
                keep_failure(cluster, item, report)
            except Exception as e:  # evidence is a help: never a second failure
                print(f"\nthe evidence of {item.nodeid} could not be kept: {e!r}")
    return report


def keep_failure(cluster: PodCluster, item: pytest.Item, report: pytest.TestReport) -> Path:
    """A failed test's evidence, kept at once under EVIDENCE/<test>[-<phase>]/: what pytest
    reports (the traceback, the test's output so far) in failure.txt, and `diagnostics` of its
    module's namespace (`NS`, else `recall`) with every pod's whole log."""
    name = "".join(c if c.isalnum() or c in "-_." else "-" for c in item.name)
    folder = EVIDENCE / (name if report.when == "call" else f"{name}-{report.when}")
    folder.mkdir(parents=True, exist_ok=True)
    parts = [f"{item.nodeid} failed ({report.when})", report.longreprtext]
    parts += [f"--- {title} ---\n{text}" for title, text in report.sections]
    (folder / "failure.txt").write_text("\n\n".join(parts) + "\n")
    namespace = str(getattr(getattr(item, "module", None), "NS", NAMESPACE))
    diagnostics(cluster, namespace, folder=folder)
    return folder


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodCluster]:
    tmp = tmp_path_factory.mktemp("pods", numbered=True)
    name = os.environ.get("RECALL_KIND_CLUSTER", "recall-e2e")
    yield from kind_cluster(tmp, name, WORKER_NODES)


@pytest.fixture(scope="package")
def kube(cluster: PodCluster) -> Kube:
    return Kube(load_api_client(cluster.kubeconfig))


@pytest.fixture(scope="package")
def api(cluster: PodCluster) -> client.ApiClient:
    return load_api_client(cluster.kubeconfig)


def ensure_crds(cluster: PodCluster) -> None:
    """The CRDs, for a release installed without them (another release's, kept, or new)."""
    from recall_dev.crds import install_crds

    install_crds(str(cluster.kubeconfig))


def release_values(cluster: PodCluster) -> list[str]:
    """helm arguments: values.yaml, the media directory, the store on the control plane, and
    what this runtime supports."""
    args = ["--values", str(VALUES)]
    media = {"hostPath": {"path": str(cluster.media_dir), "type": "Directory"}}
    args += ["--set-json", f"worker.mediaVolume={json.dumps(media)}"]
    placement = {"kubernetes.io/hostname": cluster.kind.control_plane}
    args += ["--set-json", f"store.bundled.nodeSelector={json.dumps(placement)}"]
    # The image is built from this checkout: it serves the worker health endpoint only if
    # this checkout's worker settings have it. Without it the probes would restart workers.
    if "health_port" not in WorkerSettings.model_fields:
        args += ["--set", "worker.health.port=0"]
    return args


def install(
    cluster: PodCluster,
    release: str,
    namespace: str,
    *args: str,
    chart: Path | str = CHART,
    crds: bool = False,
    wait: bool = True,
) -> None:
    """`helm install` a release of the chart with the pod tests' values (then `args`)."""
    if not crds:
        ensure_crds(cluster)
    try:
        cluster.run(
            "helm", "install", release, str(chart), "--namespace", namespace,
            "--create-namespace", *release_values(cluster),
            "--set", f"crds.install={str(crds).lower()}", *args,
            *(["--wait", "--timeout", "5m"] if wait else []),
        )  # fmt: skip
    except AssertionError:
        diagnostics(cluster, namespace)
        raise


def uninstall(cluster: PodCluster, release: str, namespace: str) -> None:
    if _failures:
        diagnostics(cluster, namespace)
    cluster.run("helm", "uninstall", release, "--namespace", namespace, "--wait", check=False)
    if namespace != NAMESPACE:
        cluster.run("kubectl", "delete", "namespace", namespace, "--wait=false", check=False)


@pytest.fixture(scope="module")
def release(cluster: PodCluster) -> Iterator[str]:
    """The chart (and its CRDs) installed and ready in the namespace `recall`; uninstalled at
    the end of the module (its last test checks the uninstall itself)."""
    install(cluster, RELEASE, NAMESPACE, crds=True)
    try:
        yield RELEASE
    finally:
        uninstall(cluster, RELEASE, NAMESPACE)


# Each run's evidence outlives it, under build/e2e-kind/<run>/: the JUnit report (`make
# e2e-kind`'s --junitxml); for each failed test, in <test>/, its traceback and output and what
# `diagnostics` saw with every pod's whole log, at the failure (`keep_failure`); and the same of
# a namespace whose module had a failure, in <namespace>/, when its release is uninstalled.
EVIDENCE = ROOT / "build" / "e2e-kind" / os.environ.get("RECALL_E2E_RUN", "last")


def keep_evidence(
    cluster: PodCluster, namespace: str, shown: str, folder: Path | None = None
) -> Path:
    """`shown` and the whole log of every pod in `namespace` (their previous containers too),
    in `folder` (EVIDENCE/<namespace> by default); the folder."""
    folder = folder or EVIDENCE / namespace
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "diagnostics.txt").write_text(shown)
    pods = cluster.run("kubectl", "get", "pods", "-n", namespace, "-o", "name", check=False)
    for pod in pods.stdout.split():
        name = pod.removeprefix("pod/")
        for previous in (False, True):
            done = cluster.run(
                "kubectl", "logs", "-n", namespace, name, "--all-containers", "--prefix",
                *(["--previous"] if previous else []), check=False,
            )  # fmt: skip
            if done.stdout:
                suffix = ".previous.log" if previous else ".log"
                (folder / f"{name}{suffix}").write_text(done.stdout)
    return folder


def diagnostics(
    cluster: PodCluster, namespace: str = NAMESPACE, *, folder: Path | None = None
) -> None:
    """Print what helps to understand a failure (nodes, pods, jobs, events, logs) and keep it
    with every pod's whole log under build/e2e-kind/ (`keep_evidence`, in `folder`)."""
    shown: list[str] = []
    for args in (
        ("get", "nodes", "-o", "wide"),
        ("get", "pods,batches,transcriptionjobs", "-n", namespace, "-o", "wide"),
        ("get", "transcriptionjobs", "-n", namespace, "-o",
         "custom-columns=JOB:.metadata.name,PHASE:.status.phase,HOLDER:.status.lease.holder,"
         "ATTEMPTS:.status.attempts,RECLAIMED:.status.expiredLeases,DONE:.status.progress."
         "chunksDone,ERROR:.status.lastError.message"),
        ("get", "events", "-n", namespace, "--sort-by=.lastTimestamp"),
        ("logs", "-n", namespace, "-l", "app.kubernetes.io/part-of=recall", "--prefix",
         "--tail=60", "--all-containers"),
    ):  # fmt: skip
        done = cluster.run("kubectl", *args, check=False)
        print(f"\n$ kubectl {' '.join(args)}\n{done.stdout[-6000:]}{done.stderr[-2000:]}")
        shown.append(f"$ kubectl {' '.join(args)}\n{done.stdout}{done.stderr}")
    kept = keep_evidence(cluster, namespace, "\n".join(shown), folder)
    print(f"\nthe evidence of this failure is kept in {kept}")
