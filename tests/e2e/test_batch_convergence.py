"""The Batch never lies and never lags: every item equals its job within two operator ticks (plus
the injected latency of the writes) after the job changes, while the API server answers slowly
and another client keeps changing the Batch (so status writes meet 409s)."""

from __future__ import annotations

import threading
import time

from recall.bucket import Bucket
from recall.kube.client import MERGE_PATCH
from recall.kube.client import KubeClient as Kube
from recall.resources import BATCH_PLURAL, GROUP, VERSION, ItemPhase
from recall.worker.holder import LeaseHolder
from tests.helpers import (
    Procs,
    complete_with_transcript,
    create_batch,
    get_batch,
    get_job,
    item_phases,
    wait_for,
)

TICK = 0.5
LATENCY = 0.2


def test_items_follow_their_jobs_within_two_ticks(
    kube: Kube, namespace: str, procs: Procs, results: Bucket
) -> None:
    procs.recall(
        "operator",
        "operator",
        "--namespace",
        namespace,
        env={"RECALL_FAULT": f"api-latency:{LATENCY}", "RECALL_OPERATOR_DISPATCH": "false"},
    )
    keys = [f"i{i}" for i in range(8)]
    create_batch(kube, namespace, "lag", keys, lease=30, simulate={"chunks": 1})
    wait_for(
        lambda: get_batch(kube, namespace, "lag").status.counts or None,
        timeout=30,
        message=procs.dump,
    )
    stop = threading.Event()
    bumps = [0]

    def other_writer() -> None:
        while not stop.wait(0.1):
            kube.custom.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                BATCH_PLURAL,
                "lag",
                {"metadata": {"labels": {"bump": str(bumps[0])}}},
                _content_type=MERGE_PATCH,
            )
            bumps[0] += 1

    writer = threading.Thread(target=other_writer, daemon=True)
    writer.start()
    delays: list[float] = []
    try:
        for key in keys:
            job = get_job(kube, namespace, f"lag-{key}")
            holder = LeaseHolder.claim(kube, job, "w", renew_deadline_fraction=0.6)
            assert isinstance(holder, LeaseHolder)
            delays.append(_seen(kube, namespace, key, ItemPhase.TRANSCRIBING))
            complete_with_transcript(holder, results)
            delays.append(_seen(kube, namespace, key, ItemPhase.COMPLETED))
    finally:
        stop.set()
        writer.join(timeout=5)
    print(f"\nitem lag after a job change: max {max(delays):.2f} s, {bumps[0]} other writes")
    assert bumps[0] > 20
    assert max(delays) <= 2 * TICK + 4 * LATENCY, delays
    batch = get_batch(kube, namespace, "lag")
    assert set(item_phases(batch).values()) == {ItemPhase.COMPLETED}
    assert (batch.status.heals or 0) == 0


def _seen(kube: Kube, namespace: str, key: str, phase: ItemPhase) -> float:
    changed = time.monotonic()
    wait_for(
        lambda: item_phases(get_batch(kube, namespace, "lag")).get(key) == phase,
        timeout=10,
        interval=0.02,
        message=f"item {key} to read {phase}",
    )
    return time.monotonic() - changed
