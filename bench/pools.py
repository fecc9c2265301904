"""A GPU pool's autoscaling from zero on a node that advertises `nvidia.com/gpu`, on kind.

The measure is the pod test `tests/e2e/pods/test_gpu_pools.py` (a kind cluster of three nodes
made here offline, the last worker node's status capacity patched to advertise two GPUs, the
chart with a GPU pool and the default pool under the builtin autoscaler, the simulated engine on
the CPU): it asserts the placement and the scaling, and writes its figures to
build/gpu/pool-scaling.json, which this section reads. No GPU is used: the figures are the
control plane's (the scheduler, the autoscaler, the pods starting), not an engine's.

`measure()` runs the test in a process of its own (several minutes: the cluster is made and
removed) and returns its figures.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "build" / "gpu" / "pool-scaling.json"
TEST = "tests/e2e/pods/test_gpu_pools.py"


def measure() -> dict[str, Any]:
    FIGURES.unlink(missing_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", TEST],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 or not FIGURES.exists():
        tail = (done.stdout + done.stderr)[-3000:]
        raise RuntimeError(f"{TEST} failed (exit {done.returncode}):\n{tail}")
    figures: dict[str, Any] = json.loads(FIGURES.read_text())
    return figures


def markdown(section: dict[str, Any]) -> list[str]:
    first = section["first_claim_from_zero_seconds"]
    steps = section.get("gpu_first_claim_steps_seconds") or {}
    lines = [
        "## A GPU pool scaling from zero",
        "",
        "On kind (three nodes), the last worker node advertising "
        f"{section['gpus_on_the_node']} `nvidia.com/gpu` (its status capacity patched, labelled "
        "and tainted as a GPU node); the chart with a GPU pool (one GPU and "
        f"{section['most_leases_of_one_worker'].get('gpu', '?')} slots a worker, at most "
        f"{section['gpu_workers_wanted']} workers) and the default pool, both at zero, the "
        "builtin autoscaler, the simulated engine on the CPU. A Batch for each pool applied "
        f"together (`tests/e2e/pods/test_gpu_pools.py`; cooldown {section['cooldown_seconds']} s).",
        "",
        "| measure | value |",
        "| --- | --- |",
        f"| `kubectl apply` → first claim, GPU pool from zero | {first['gpu']} s |",
        f"| `kubectl apply` → first claim, default pool from zero | {first['default']} s |",
    ]
    lines += [f"| GPU pool: {step} | {seconds} s |" for step, seconds in steps.items()]
    pods = "; ".join(
        f"{node}: " + ", ".join(f"{n} {pool}" for pool, n in sorted(by_pool.items()))
        for node, by_pool in section["worker_pods_per_node"].items()
    )
    lines += [
        f"| GPU workers wanted / GPUs on the node | {section['gpu_workers_wanted']} / "
        f"{section['gpus_on_the_node']} (the third Pending: {_why(section['unschedulable'])}) |",
        f"| worker pods per node | {pods} |",
        f"| jobs (GPU pool, default pool) | {section['jobs']['gpu']}, "
        f"{section['jobs']['default']} |",
        f"| both Batches done → both pools at zero | {section['back_to_zero_seconds']} s |",
        "",
    ]
    return lines


def _why(message: str) -> str:
    """The scheduler's reasons of an unschedulable pod's message, without its preemption part."""
    reasons = message.split("available:", 1)[-1].split(". preemption", 1)[0]
    return reasons.strip().rstrip(".")
