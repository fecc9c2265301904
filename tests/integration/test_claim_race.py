"""Many workers race for one job: the API server lets exactly one claim through."""

from __future__ import annotations

import datetime as dt
import threading

import pytest

from recall.fencing import fenced_write
from recall.kube.client import KubeClient as Kube
from recall.kube.client import load_api_client
from recall.protocol import lease
from recall.protocol.lease import Budget
from recall.resources import Phase
from recall_dev.cluster import ControlPlane
from tests.helpers import create_job, get_job

RACERS = 20


@pytest.mark.parametrize("from_known_copy", [True, False], ids=["same-rv", "fresh-read"])
def test_twenty_workers_race__exactly_one_claim_succeeds(
    control_plane: ControlPlane, kube: Kube, namespace: str, from_known_copy: bool
) -> None:
    job = create_job(kube, namespace, "prize")
    clients = [Kube(load_api_client(control_plane.kubeconfig)) for _ in range(RACERS)]
    barrier = threading.Barrier(RACERS)
    results: dict[str, object] = {}

    def race(i: int) -> None:
        worker, token = f"w{i:02d}", lease.new_token()
        barrier.wait()
        results[worker] = fenced_write(
            clients[i],
            namespace,
            "prize",
            lambda j: lease.claim(
                j.status,
                dt.datetime.now(dt.UTC),
                worker,
                token,
                lease_seconds=30,
                budget=Budget(5, 10),
            ),
            known=job if from_known_copy else None,
            retry_on_conflict=False,
            action="claim",
        )

    threads = [threading.Thread(target=race, args=(i,)) for i in range(RACERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)

    winners = [w for w, r in results.items() if r.applied]  # type: ignore[attr-defined]
    assert len(results) == RACERS
    assert len(winners) == 1, winners
    final = get_job(kube, namespace, "prize")
    assert final.status.phase == Phase.LEASED
    assert final.status.lease is not None and final.status.lease.holder == winners[0]
    assert final.status.attempts == 1
