"""A local control plane or object store whose binaries are missing fails with a clear error
and leaves no directory behind."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from recall_dev.cluster import ControlPlane, ControlPlaneError
from recall_dev.objstore import ObjectStore, ObjectStoreError


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary directory the dev tools make their working directories in."""
    made = tmp_path / "tmp"
    made.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(made))
    return made


def test_object_store__missing_weed_fails_and_leaves_nothing(tmp_path: Path, scratch: Path) -> None:
    store = ObjectStore(bin_dir=tmp_path / "empty")
    with pytest.raises(ObjectStoreError, match="weed is missing"):
        store.start()
    assert list(scratch.iterdir()) == []


def test_control_plane__missing_binaries_fail_and_leave_nothing(
    tmp_path: Path, scratch: Path
) -> None:
    plane = ControlPlane(bin_dir=tmp_path / "empty")
    with pytest.raises(ControlPlaneError, match="etcd is missing"):
        plane.start()
    assert list(scratch.iterdir()) == []
