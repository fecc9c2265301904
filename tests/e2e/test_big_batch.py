"""A big Batch, as one object a user applies (its items listed in ConfigMaps), fanned out and
drained by simulated workers: no object near etcd's limit, a Batch status of a few kilobytes,
the CLI and kopf's own annotation unaffected by the size.

3,000 items here, three times the inline bound, so in an item list (two to three minutes on
two cores beside the other tests); `RECALL_BIG_ITEMS` sets another size, and `make bench` runs
10,000 and 100,000 (sections big and huge), with the figures of each size."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from recall.cli.submission import MAX_ITEMS, Media, submission_for, submit_to
from recall.kube.client import KubeClient as Kube
from recall_dev.cluster import ControlPlane
from tests.helpers import Procs, get_batch, wait_for

ITEMS = int(os.environ.get("RECALL_BIG_ITEMS", "3000"))
WORKERS = 16


@pytest.mark.slow
@pytest.mark.timeout(max(1200, ITEMS // 5))
def test_big_batch__one_object_small_status_and_it_completes(
    control_plane: ControlPlane, kube: Kube, namespace: str, procs: Procs
) -> None:
    media = [Media(key=f"{i:06d}", url=f"file:///media/talk-{i:06d}.wav") for i in range(ITEMS)]
    plan = submission_for(media, name="big", engine="simulated", lease_seconds=30)
    plan.batch["spec"]["defaults"]["engine"]["simulate"] = {"chunks": 1, "chunkDelaySeconds": 0}
    submit_to(kube, namespace, plan)
    batch = get_batch(kube, namespace, "big")
    if ITEMS > MAX_ITEMS:
        assert batch.spec.items == [] and len(batch.spec.items_from) == 1

    procs.recall("operator", "operator", "--namespace", namespace)
    for i in range(WORKERS):
        procs.worker(f"w{i}", "--engine", "simulated", "--namespace", namespace)
    wait_for(
        lambda: get_batch(kube, namespace, "big").status.complete,
        timeout=max(900, ITEMS // 6),
        interval=2,
        message=procs.dump,
    )
    batch = get_batch(kube, namespace, "big")
    assert batch.status.counts is not None and batch.status.counts.completed == ITEMS
    assert batch.status.completed_indexes == f"0-{ITEMS - 1}"
    raw = kube.custom.get_namespaced_custom_object(
        "recall.dev", "v1alpha1", namespace, "batches", "big"
    )
    assert len(json.dumps(raw)) < 16_000, len(json.dumps(raw))
    annotation = raw["metadata"]["annotations"].get("recall.dev/last-handled-configuration", "")
    assert "items" not in json.loads(annotation or "{}").get("spec", {})
    assert (batch.status.heals or 0) == 0

    env = control_plane.env()
    watched = subprocess.run(
        [sys.executable, "-m", "recall", "watch", "big", "-n", namespace, "--timeout", "30"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert watched.returncode == 0, watched.stderr
    assert f"{ITEMS}/{ITEMS} completed" in watched.stdout
    listed = subprocess.run(
        [sys.executable, "-m", "recall", "get", "jobs", "--batch", "big", "-n", namespace],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split()[:2] == ["NAME", "PHASE"] and len(lines) == ITEMS + 1
