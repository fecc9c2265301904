"""A worker that starts removes the downloads an earlier worker process left in /tmp when it
died (an emptyDir outlives a container's restart), before it claims anything."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from recall_dev.twin.api import MemoryApi
from tests.unit.worker.test_worker_loop import make_worker

GONE = (1 << 22) + 1  # above the largest pid_max Linux allows: no process has it


def test_worker__start_removes_what_a_dead_worker_downloaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    left = [temp / f"recall-{kind}-{GONE}-0123abcd-q1.wav" for kind in ("media", "source")]
    for path in left:
        path.write_bytes(b"half a download")
    (temp / "someone-else.wav").write_bytes(b"")
    worker = make_worker(MemoryApi(watch_seconds=1.0), tmp_path)
    worker.stop()  # it starts, then takes nothing
    with capture_logs() as logs:
        assert worker.run() == 0
    assert sorted(p.name for p in temp.iterdir()) == ["someone-else.wav"]
    [swept] = [e for e in logs if e["event"] == "temporary_files_removed"]
    assert swept["files"] == 2
