"""The local control plane: `recall dev up/status/down`, and no orphans when its owner dies."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from recall_dev.cluster import ControlPlane, tools_bin_dir
from tests.helpers import wait_for

pytestmark = pytest.mark.slow


def port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def recall(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "recall", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_dev_up_status_down__works_and_leaves_nothing_running(tmp_path: Path) -> None:
    up = recall("dev", "up", cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    kubeconfig = tmp_path / ".recall-dev" / "kubeconfig"
    assert f"export KUBECONFIG={kubeconfig}" in up.stdout
    try:
        kubectl = tools_bin_dir(build=False) / "kubectl"
        readyz = subprocess.run(
            [str(kubectl), "get", "--raw", "/readyz"],
            capture_output=True,
            text=True,
            env=os.environ | {"KUBECONFIG": str(kubeconfig)},
            timeout=30,
            check=False,
        )
        assert readyz.stdout.strip() == "ok", readyz.stderr
        crds = subprocess.run(
            [str(kubectl), "get", "crd", "-o", "name"],
            capture_output=True,
            text=True,
            env=os.environ | {"KUBECONFIG": str(kubeconfig)},
            timeout=30,
            check=True,
        ).stdout
        assert "customresourcedefinition.apiextensions.k8s.io/batches.recall.dev" in crds

        status = recall("dev", "status", cwd=tmp_path)
        assert status.returncode == 0, status.stderr
        state = json.loads(status.stdout)
        assert state["ready"] is True
        pids = [p["pid"] for p in state["processes"].values()]
        assert all(p["alive"] for p in state["processes"].values())
        port = int(state["server"].rsplit(":", 1)[1])
        again = recall("dev", "up", cwd=tmp_path)  # idempotent: the same control plane
        assert again.returncode == 0 and f"export KUBECONFIG={kubeconfig}" in again.stdout
        assert json.loads(recall("dev", "status", cwd=tmp_path).stdout)["server"] == state["server"]
    finally:
        down = recall("dev", "down", cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    assert all(pid_gone(p) for p in pids)
    assert port_free(port)
    assert not (tmp_path / ".recall-dev").exists()
    gone = recall("dev", "status", cwd=tmp_path)
    assert gone.returncode == 1 and gone.stderr.startswith("error: no control plane")


def test_control_plane__dies_with_its_owner(tmp_path: Path) -> None:
    """SIGKILL the process that started the control plane: etcd and the API server follow."""
    script = textwrap.dedent(f"""
        import json, sys, time
        from pathlib import Path
        from recall_dev.cluster import ControlPlane
        cp = ControlPlane(workdir=Path({str(tmp_path / "cp")!r}), controller_manager=False)
        cp.start()
        print(json.dumps({{"pids": [p.pid for p in cp.procs], "port": cp.apiserver_port}}),
              flush=True)
        time.sleep(600)
    """)
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        info = json.loads(owner.stdout.readline())
        assert all(not pid_gone(p) for p in info["pids"])
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=10)
    wait_for(
        lambda: all(pid_gone(p) for p in info["pids"]),
        timeout=15,
        message="the servers to die with their owner",
    )
    wait_for(lambda: port_free(info["port"]), timeout=10, message="the port to be free")


def test_control_plane__stop_keeps_logs_only_when_asked() -> None:
    cp = ControlPlane(controller_manager=False)
    cp.start()
    workdir = cp.workdir
    assert workdir is not None
    kept = cp.stop(keep_logs=True)
    try:
        assert kept is not None and (kept / "kube-apiserver.log").stat().st_size > 0
        assert not workdir.exists()
    finally:
        if kept:
            import shutil

            shutil.rmtree(kept)
    started = time.monotonic()
    assert cp.stop() is None  # idempotent
    assert time.monotonic() - started < 1


def test_kubeconfig__a_killed_client_leaves_no_files(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    """The dev kubeconfig references its certificates by path: the Python client would copy
    embedded ones to temporary files that only a normal exit removes."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    code = textwrap.dedent(
        f"""
        import os, signal
        from recall.kube.client import load_api_client, KubeClient
        store = KubeClient(load_api_client({str(control_plane.kubeconfig)!r}))
        assert store.get_config_map("default", "no-such-map") is None
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    killed = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "TMPDIR": str(scratch)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert sorted(p.name for p in scratch.iterdir()) == []


def test_control_plane__a_port_taken_before_it_is_bound__starts_on_new_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import recall_dev.cluster as cluster

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        choices: list[list[int]] = []
        real = cluster.free_ports

        def first_one_taken(n: int) -> list[int]:
            ports = real(n)
            if n == 3:  # etcd's two and the API server's
                ports[-1] = busy if not choices else ports[-1]  # the API server's, first time
                choices.append(ports)
            return ports

        monkeypatch.setattr(cluster, "free_ports", first_one_taken)
        said: list[str] = []
        cp = ControlPlane(workdir=tmp_path / "cp")
        cp.start(progress=said.append)
        try:
            assert len(choices) == 2, choices
            assert cp.apiserver_port == choices[1][2] != busy
            assert any("starting again on new ports" in line for line in said), said
            assert cp.ready()
        finally:
            cp.stop()
    assert port_free(choices[1][2]) and port_free(choices[1][0])


def test_free_ports__are_distinct() -> None:
    from recall_dev.cluster import free_ports

    for _ in range(50):
        ports = free_ports(3)
        assert len(set(ports)) == 3
