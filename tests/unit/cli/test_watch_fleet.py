"""`recall watch` shows the autoscaled workers: current and desired counts, the reason of the last
decision, and the scaling Events (on the memory store)."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from recall.cli.watch import fetch, fleet_line, summary_line
from recall.kube import ObjectRef
from recall.operator.scaling.scaler import STATUS_ANNOTATION
from recall_dev.twin.api import MemoryApi
from tests.unit.fakes import NS, batch_manifest


def autoscaled(store: MemoryApi, name: str, mode: str, status: dict[str, object] | None) -> None:
    """A worker Deployment as the chart labels it, with the autoscaler's status if any."""
    labels = {"recall.dev/autoscaling": mode}
    store.put_deployment(NS, name, 3, {"app": name}, own_labels=labels)
    if status is not None:
        store.patch_deployment_annotations(NS, name, {STATUS_ANNOTATION: json.dumps(status)})


def test_watch__shows_the_autoscaled_workers_and_their_scaling_events() -> None:
    store = MemoryApi()
    store.create_batch(NS, batch_manifest("talks", ["a", "b"]))
    status = {"desired": 5, "current": 3, "draining": 0, "reason": "ScaledUp", "message": "3 → 5"}
    autoscaled(store, "recall-worker", "builtin", status)
    autoscaled(store, "fixed-worker", "fixed", None)
    store.post_event(
        ObjectRef("Deployment", NS, "recall-worker", None, "apps/v1"),
        "Normal",
        "ScaledUp",
        "3 → 5 workers: 5 outstanding jobs (5 queued, 0 leased)",
    )
    seen: set[str] = set()
    since = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5)
    snap = fetch(store, NS, "talks", since, seen)
    assert snap.workers == ["workers recall-worker: 3 → 5 desired, 0 draining (ScaledUp: 3 → 5)"], (
        "the fixed Deployment is not shown"
    )
    assert snap.events == ["ScaledUp: 3 → 5 workers: 5 outstanding jobs (5 queued, 0 leased)"]
    assert fetch(store, NS, "talks", since, seen).events == [], "each Event once"
    assert "workers recall-worker: 3 → 5 desired" in summary_line(snap)


def test_fleet_line__before_any_decision_or_under_keda() -> None:
    deployment = {
        "metadata": {"name": "w", "labels": {"recall.dev/autoscaling": "keda"}},
        "spec": {"replicas": 2},
    }
    assert fleet_line(deployment) == "workers w: 2 (keda)"


def test_fleet_line__a_pool_of_several_slots_a_worker_counts_its_slots() -> None:
    status = {"desired": 3, "current": 1, "draining": 0, "reason": "ScaledUp", "message": "m"}
    deployment = {
        "metadata": {
            "name": "w-gpu",
            "labels": {"recall.dev/autoscaling": "builtin", "recall.dev/pool": "gpu"},
            "annotations": {STATUS_ANNOTATION: json.dumps(status), "recall.dev/slots": "4"},
        },
        "spec": {"replicas": 1},
    }
    assert fleet_line(deployment) == (
        "workers w-gpu (pool gpu): 1 × 4 slots = 4 → 3 × 4 slots = 12 desired, "
        "0 draining (ScaledUp: m)"
    )


def test_watch__a_batch_its_model_cannot_read_is_one_line_not_a_traceback() -> None:
    from recall.cli.watch import BatchNotFound
    from recall.kube.verbs import BATCHES
    from recall.resources import API_VERSION

    store = MemoryApi()
    body = {"apiVersion": API_VERSION, "kind": "Batch", "metadata": {"name": "oops"}}
    store.verbs.create(BATCHES, NS, body)  # stored before the CRD required a spec
    with pytest.raises(BatchNotFound) as e:
        fetch(store, NS, "oops", dt.datetime.now(dt.UTC), set())
    assert str(e.value).startswith('batches.recall.dev "oops" cannot be read (spec')
    assert "\n" not in str(e.value)
