"""The private Docker daemon's cgroup bookkeeping: what it finds under `docker` before it starts
is what it leaves alone when it stops."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from recall_dev import docker


@pytest.fixture
def cgroups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cgroup"
    for d in ("memory/docker/abc/kubelet.slice/pod1", "cpu/docker/abc", "docker/v2"):
        (root / d).mkdir(parents=True)
    (root / "memory/other").mkdir()
    monkeypatch.setattr(docker, "CGROUP_ROOT", root)
    return root


def test_docker_cgroups__every_directory_under_docker(cgroups: Path) -> None:
    found = {str(p.relative_to(cgroups)) for p in docker._docker_cgroups()}
    assert found == {
        "memory/docker",
        "memory/docker/abc",
        "memory/docker/abc/kubelet.slice",
        "memory/docker/abc/kubelet.slice/pod1",
        "cpu/docker",
        "cpu/docker/abc",
        "docker",
        "docker/v2",
    }


def test_docker_cgroups__one_that_goes_while_read_is_left_out(
    cgroups: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kind node's kubelet removes a pod's cgroup between its parent's listing and its own."""
    gone = cgroups / "memory/docker/abc/kubelet.slice"
    scandir = os.scandir

    def racing(path: str | os.PathLike[str]) -> Iterator[os.DirEntry[str]]:
        if Path(path) == gone:
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", racing)
    found = {str(p.relative_to(cgroups)) for p in docker._docker_cgroups()}
    assert "memory/docker/abc" in found and "cpu/docker/abc" in found
    assert "memory/docker/abc/kubelet.slice/pod1" not in found
