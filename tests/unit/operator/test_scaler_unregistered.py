"""The built-in autoscaler's decision with pods that never registered (pending, crash-looping,
starting): they hold nothing and go without a drain, never in a busy worker's place."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

from recall.operator.scaling.decide import Inputs, PodView, Reason, WorkerView, decide
from recall.operator.scaling.workload import Outstanding
from recall.protocol.workers import BUSY, DRAINING, IDLE
from tests.unit.operator.test_scaler import NOW, POLICY, _random_inputs


def unregistered(n: int, **kw: Any) -> Inputs:
    """`n` unready pods p0… of no registration, no work, `n` replicas asked for."""
    pods = tuple(PodView(f"p{k}", ready=False) for k in range(n))
    return Inputs(POLICY, Outstanding(0, 0), n, pods=pods, **kw)


def test_down__unready_pods_that_never_registered_go_without_a_drain() -> None:
    d = decide(unregistered(3, below_since=0.0), NOW)
    assert (d.reason, d.replicas, d.removed, d.drain) == (Reason.SCALED_DOWN, 1, (), ())
    assert "3 → 1 workers" in d.message and "never registered p0, p1" in d.message
    d = decide(unregistered(1, below_since=0.0), NOW)
    assert (d.reason, d.replicas) == (Reason.SCALED_DOWN, 0)


def test_down__an_unready_registered_worker_keeps_them_waiting_and_the_message_says_so() -> None:
    base = unregistered(3, below_since=0.0)
    pods = (*base.pods, PodView("w0", ready=False))  # busy, and its probe fails
    d = decide(replace(base, replicas=4, pods=pods, workers=(WorkerView("w0", BUSY),)), NOW)
    assert d.reason is Reason.DRAINING and d.replicas is None
    assert "waiting for an idle worker to drain" in d.message, d.message
    # an idle worker beside them is asked as before
    idle = (*pods, PodView("w1", ready=True))
    workers = (WorkerView("w0", BUSY), WorkerView("w1", IDLE))
    d = decide(replace(base, replicas=5, pods=idle, workers=workers, busy=frozenset({"w0"})), NOW)
    assert d.drain == ("w1",) and "waiting for 2 of 2 idle workers to drain" in d.message


def test_down__drained_workers_go_before_pods_that_never_registered() -> None:
    base = unregistered(2, below_since=0.0)
    pods = (*base.pods, PodView("w0", ready=False))
    drained = WorkerView("w0", DRAINING, drain="r0", drained=True)
    d = decide(replace(base, replicas=3, pods=pods, workers=(drained,)), NOW)
    assert (d.replicas, d.removed) == (1, ("w0",)) and "never registered p0" in d.message


def test_randomized__pods_that_never_registered_never_let_a_busy_worker_go() -> None:
    rng = random.Random(5)
    downs = 0
    for _ in range(20_000):
        i = _random_inputs(rng)
        gone = [w.name for w in i.workers if rng.random() < 0.3]  # their registrations
        i = replace(i, workers=tuple(w for w in i.workers if w.name not in gone))
        d = decide(i, NOW)
        if d.replicas is None or i.replicas is None or d.replicas >= i.replicas:
            continue
        live = [p for p in i.pods if not p.terminating]
        registered = {w.name for w in i.workers}
        drained = {w.name for w in i.workers if w.drained} - i.busy
        idle = {
            p.name
            for p in live
            if not p.ready
            and (p.name in drained or (p.name not in registered and p.name not in i.busy))
        }
        unready = {p.name for p in live if not p.ready}
        removing = len(live) - d.replicas
        absorbing = {p.name for p in live if not p.ready and p.name in drained}
        downs += removing > len(absorbing)
        # beyond the drained, unready pods only while every unready pod holds nothing
        assert removing <= len(absorbing) or (removing <= len(idle) and unready <= idle), (i, d)
    assert downs > 100
