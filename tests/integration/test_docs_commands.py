"""The first run that docs/development.md and the README's Develop section show, run as shown:
the lines of the block, in order, in one bash, from a directory laid out like a fresh clone
(every entry of the checkout linked in, so `make` and `.venv` are the checkout's), against the
control plane and object store that `recall dev up` starts there. `recall dev down` at the end
of the block stops them; the test stops them too if the block failed half-way."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```bash\n(?P<body>.*?)^```", re.M | re.S)


def first_run_block(page: Path, heading: str) -> str:
    text = page.read_text()
    section = text[text.index(heading) :]
    m = FENCE.search(section)
    assert m is not None, f"no bash block under {heading} in {page}"
    return m["body"]


def link_tree(root: Path, clone: Path) -> None:
    """`clone` laid out like `root`: each entry a link, but the two pyproject.toml files, copied
    as old as the virtualenv's stamp, so `make venv` finds `.venv` current and never reinstalls
    the checkout's virtualenv from the clone's paths."""
    stamp = (root / ".venv" / ".installed").stat().st_mtime
    clone.mkdir()
    for entry in root.iterdir():
        if entry.name in (".recall-dev", ".git", "dev", "pyproject.toml"):
            continue
        (clone / entry.name).symlink_to(entry)
    (clone / "dev").mkdir()
    for entry in (root / "dev").iterdir():
        if entry.name != "pyproject.toml":
            (clone / "dev" / entry.name).symlink_to(entry)
    for name in ("pyproject.toml", "dev/pyproject.toml"):
        shutil.copyfile(root / name, clone / name)
        os.utime(clone / name, (stamp - 60, stamp - 60))


def test_first_run__the_readme_and_the_development_page_show_the_same_commands() -> None:
    readme = first_run_block(ROOT / "README.md", "## Develop")
    page = first_run_block(ROOT / "docs" / "development.md", "## First run")
    assert readme == page


def test_first_run__every_command_runs_as_shown(tmp_path: Path) -> None:
    block = first_run_block(ROOT / "docs" / "development.md", "## First run")
    clone = tmp_path / "clone"
    link_tree(ROOT, clone)
    script = clone / "first-run.sh"
    # Each line as shown; `set -e` makes the first one that fails end the run with its status.
    script.write_text("set -euo pipefail\nset -x\n" + block)
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("RECALL_", "AWS_", "KUBECONFIG"))
    }
    env["PATH"] = "/usr/local/go/bin:/usr/local/bin:/usr/bin:/bin"
    proc = subprocess.Popen(
        ["bash", str(script)],
        cwd=clone,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    out = ""
    try:
        out, _ = proc.communicate(timeout=480)  # a few minutes at most, on a busy machine
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        # Whatever the block left: its background jobs, and the dev control plane.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        if (clone / ".recall-dev").exists():
            subprocess.run(
                [str(ROOT / ".venv" / "bin" / "recall"), "dev", "down"],
                cwd=clone,
                capture_output=True,
                timeout=120,
            )
    logs = "".join(
        f"\n--- {log.name}\n{log.read_text(errors='replace')[-3000:]}"
        for log in sorted(clone.glob("*.log"))
        if not log.is_symlink()
    )
    assert proc.returncode == 0, out[-6000:] + logs
    # What each step should have shown: the store URL exported, the transcript printed.
    assert (
        "export RECALL_STORE_URL=s3://recall/dev" in out or "RECALL_STORE_URL=s3://recall/" in out
    )
    assert "+ recall transcript first/monday" in out
    transcript = out.split("+ recall transcript first/monday", 1)[1].split("\n+ ", 1)[0]
    assert transcript.strip(), out[-3000:]
    assert not (clone / ".recall-dev").exists()  # recall dev down removed it
