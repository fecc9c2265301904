"""`recall dev up --kind`, then the README's `helm install` exactly as written (`make e2e-kind`).

As a new user would: the command makes a kind cluster for development with the chart's default
images loaded and no CRDs of its own; `helm install recall charts/recall --namespace recall
--create-namespace` (no values at all) installs and gets ready, the CRDs being the chart's;
`recall dev down` removes the cluster, its network and its daemon, and nothing of them is left.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from recall_dev.docker import KIND_DEV_DAEMON, DockerEngine

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1500)]

ROOT = Path(__file__).resolve().parents[3]


def recall(*args: str, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "recall", *args], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, f"recall {' '.join(args)}:\n{done.stdout}{done.stderr}"
    return done.stdout


def test_dev_up_kind__the_readmes_helm_install_works_as_written(tmp_path: Path) -> None:
    env = {**os.environ, "RECALL_REPO": str(ROOT)}
    workdir = tmp_path / "dev"
    exports = recall(
        "dev", "up", "--kind", "--workers", "1", "--dir", str(workdir), cwd=ROOT, env=env
    )
    try:
        for line in exports.splitlines():
            if line.startswith("export "):
                name, value = line.removeprefix("export ").split("=", 1)
                env[name] = value.replace("$PATH", os.environ["PATH"])
        kubeconfig = env["KUBECONFIG"]
        assert Path(kubeconfig).exists()

        def run(*args: str) -> str:
            done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True)
            assert done.returncode == 0, f"{' '.join(args)}:\n{done.stdout}{done.stderr}"
            return done.stdout

        # No CRDs before the chart: `dev up --kind` leaves them to it.
        assert "recall.dev" not in run("kubectl", "get", "crd", "-o", "name")
        run(
            "helm", "install", "recall", "charts/recall", "--namespace", "recall",
            "--create-namespace", "--wait", "--timeout", "6m",
        )  # fmt: skip
        pods = json.loads(run("kubectl", "get", "pods", "-n", "recall", "-o", "json"))["items"]
        components = {p["metadata"]["labels"]["app.kubernetes.io/component"] for p in pods}
        assert components == {"operator", "worker", "store"}
        for pod in pods:
            ready = [c for c in pod["status"]["conditions"] if c["type"] == "Ready"]
            assert ready and ready[0]["status"] == "True", pod["metadata"]["name"]
        # The README's next line: `recall doctor` in a pod, every check passing.
        run("helm", "test", "recall", "--namespace", "recall")
        said = run("kubectl", "logs", "-n", "recall", "recall-doctor").splitlines()
        checks = {line.split()[1]: line.split()[0] for line in said if line[:2] in ("ok", "FA")}
        assert set(checks) >= {"crds", "operator", "store", "workers", "engines", "apf", "access"}
        assert set(checks.values()) == {"ok"}, said
        crd = json.loads(run("kubectl", "get", "crd", "transcriptionjobs.recall.dev", "-o", "json"))
        assert crd["metadata"]["annotations"]["meta.helm.sh/release-name"] == "recall"
        status = json.loads(recall("dev", "status", "--dir", str(workdir), cwd=ROOT, env=env))
        assert status["ready"] and len(status["nodes"]) == 2
    finally:
        recall("dev", "down", "--dir", str(workdir), cwd=ROOT, env=env)
    docker = DockerEngine(host=f"unix://{KIND_DEV_DAEMON.socket}")
    assert not docker.answers(), "the development cluster's daemon still runs"
    assert not (workdir / "kind").exists()
    # (dev down's kind.delete raised if a container, the network or a volume of it were left.)
    leftovers = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout.count(
        str(KIND_DEV_DAEMON.run_dir)
    )
    assert leftovers == 0, "a process of the development daemon is left"
