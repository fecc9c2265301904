"""Temporary files a dead process left (a download cut by SIGKILL or the OOM killer) are swept;
those of this process and of other live processes sharing the directory stay."""

from __future__ import annotations

import os
from pathlib import Path

from recall.media import fetch
from recall.media.fetch import save, sweep

GONE = (1 << 22) + 1  # above the largest pid_max Linux allows: no process has it


def plant(directory: Path, name: str) -> Path:
    path = directory / name
    path.write_bytes(b"partial download")
    return path


def test_sweep__removes_a_dead_process_s_files_and_keeps_live_ones(tmp_path: Path) -> None:
    mine, _ = save([b"a download under way"], "x", None, tmp_path, ".wav")
    source, _ = save([b"another"], "x", None, tmp_path, ".mp3", "recall-source-")
    parent = plant(tmp_path, f"recall-media-{os.getppid()}-0123abcd-k2j4.wav")  # alive
    dead = plant(tmp_path, f"recall-media-{GONE}-0123abcd-k2j4.wav")
    dead_source = plant(tmp_path, f"recall-source-{GONE}-0123abcd-x9.m4a")
    unknown = [plant(tmp_path, n) for n in ("recall-media-old.wav", "notes.txt", "recall-x-1-2-")]
    assert sweep(tmp_path) == 2
    assert not dead.exists() and not dead_source.exists()
    assert all(p.exists() for p in [mine, source, parent, *unknown])


def test_sweep__removes_an_earlier_run_with_this_process_s_pid(tmp_path: Path) -> None:
    """A restarted container's worker often has the pid its predecessor had (1)."""
    other_run = "ffffffff" if fetch._RUN != "ffffffff" else "00000000"
    earlier = plant(tmp_path, f"recall-source-{os.getpid()}-{other_run}-abc.wav")
    assert sweep(tmp_path) == 1
    assert not earlier.exists()


def test_sweep__a_missing_directory_or_a_directory_entry_is_no_error(tmp_path: Path) -> None:
    (tmp_path / f"recall-media-{GONE}-0123abcd-dir").mkdir()
    assert sweep(tmp_path) == 0
    assert sweep(tmp_path / "missing") == 0
