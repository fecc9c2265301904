"""`make venv` installs the two projects editable without a warning a newcomer must learn to
ignore (setuptools warns when an editable install needs its meta path finder). Slow for a unit
test (a new virtualenv, setuptools from the package index for the build): kept here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_editable_install__of_both_projects_prints_no_warning(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    # As the Makefile does (its dependencies left out: they are not what warns).
    out = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", "--no-deps", "-e", ".", "-e", "dev"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    assert "arning" not in out.stdout + out.stderr, out.stdout + out.stderr
    paths = (venv / "lib").glob("python3*/site-packages/__editable__*.pth")
    entries = sorted(p.read_text().strip() for p in paths)
    assert entries == [str(ROOT / "dev"), str(ROOT / "operator")]
