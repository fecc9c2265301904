"""The whole system under faults, checked against every invariant of DESIGN §5.

Each seed is one run of `recall_dev.chaos` on a control plane and an S3 server (SeaweedFS) of
its own: two operators with leader election, a fleet of simulated workers and a few hundred
jobs, while workers are killed, frozen (by SIGSTOP, and at a fault point right before a write),
stopped gracefully, operators are killed, frozen and crash in the middle of a publish, stale
writers write without a resourceVersion, etcd, kube-apiserver and the S3 server restart, and
the store is slow, loses PUT answers or is down for a few seconds. The invariants are checked
on the recorded history and on the bucket's listing at the end. A violated invariant fails the
test with its evidence, and so does a drain that ran out of time (its own verdict, "drain timed
out: N jobs not ended", not counted as broken invariants); the one line of each run is printed
at the end of the session.

`make test` runs the short profile with one seed (about two minutes); `make chaos` the long
profile with three (RECALL_CHAOS_PROFILE, RECALL_CHAOS_SEEDS).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from recall_dev.chaos import PROFILES, run

PROFILE = os.environ.get("RECALL_CHAOS_PROFILE", "short")
SEEDS = [int(s) for s in os.environ.get("RECALL_CHAOS_SEEDS", "1").split(",") if s.strip()]


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("seed", SEEDS)
def test_chaos__every_invariant_holds(seed: int, tmp_path: Path, chaos_lines: list[str]) -> None:
    outcome = run(seed, PROFILES[PROFILE], tmp_path / f"seed-{seed}", say=print)
    chaos_lines.append(outcome.line)
    if outcome.ok:
        return
    # pytest keeps only its last few temporary roots, and other sessions may run pytest too:
    # keep the records of a failed run where nothing rotates them away.
    kept = Path(tempfile.mkdtemp(prefix=f"recall-chaos-seed{seed}-"))
    shutil.copytree(outcome.workdir, kept, dirs_exist_ok=True)
    pytest.fail(
        f"{outcome.line}\n{outcome.report()}\n"
        f"records of the run kept in {kept} (check them again: python -m recall_dev.chaos "
        f"--check {kept})",
        pytrace=False,
    )
