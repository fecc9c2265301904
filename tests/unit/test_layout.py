"""The runtime package's layering, as the import-linter contracts in pyproject.toml state it.

`make lint` runs `lint-imports` on the tree. These tests check that the contracts hold on the
tree as it is, and that they still bite: each one is broken on purpose in a copy of the tree,
and `lint-imports` must refuse the copy, naming the contract. A contract that silently stopped
matching anything (a package renamed, a typo in a module name) fails here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import recall
from tests.helpers import run_captured

PACKAGE = Path(recall.__file__).resolve().parent
REPO = PACKAGE.parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` over the `recall` package under `root/operator`, with its contracts."""
    env = {**os.environ, "PYTHONPATH": str(root / "operator")}
    return run_captured(
        [LINT_IMPORTS, "--config", root / "pyproject.toml", "--no-cache"],
        timeout=120,
        cwd=root,
        env=env,
    )


def contract_names() -> dict[str, str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    return {c["id"]: c["name"] for c in config["tool"]["importlinter"]["contracts"]}


def test_the_tree_keeps_every_contract() -> None:
    done = lint(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    for name in contract_names().values():
        assert f"{name} KEPT" in " ".join(done.stdout.split())


# (contract id, module of the copy, an import added to it)
VIOLATIONS = [
    ("components", "operator/controller.py", "from recall.worker import holder"),
    ("components", "worker/attempt.py", "from recall.operator.reconcile import project"),
    ("operator", "operator/reconcile/cache.py", "from recall.operator import controller"),
    ("operator", "operator/peers/leader.py", "from recall.operator.results import publish"),
    ("layers", "kube/base.py", "from recall.protocol import lease"),
    ("layers", "base/log.py", "from recall.resources import Batch"),
    ("engines", "engines/whisper/engine.py", "from recall.transcripts import Transcript"),
    ("layers", "media/fetch.py", "from recall.engines import base"),
    ("engines", "media/cut.py", "from recall.worker import loop"),
    ("dev-tools", "worker/loop.py", "import recall_dev.procs"),
    ("acyclic", "resources/common.py", "from recall.resources import job"),
]


@pytest.mark.parametrize(("contract", "module", "line"), VIOLATIONS)
def test_a_deliberate_violation_is_refused(
    tmp_path: Path, contract: str, module: str, line: str
) -> None:
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copytree(
        PACKAGE, tmp_path / "operator" / "recall", ignore=shutil.ignore_patterns("__pycache__")
    )
    target = tmp_path / "operator" / "recall" / module
    target.write_text(target.read_text() + f"\n{line}  # a deliberate violation\n")

    done = lint(tmp_path)

    assert done.returncode != 0, done.stdout
    assert f"{contract_names()[contract]} BROKEN" in " ".join(done.stdout.split())
