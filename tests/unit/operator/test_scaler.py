"""The built-in autoscaler's pure decision (`recall.operator.scaling.decide`): one case per rule,
and a randomized check that no decision lets the ReplicaSet remove a busy worker."""

from __future__ import annotations

import random
from collections.abc import Collection
from dataclasses import replace
from typing import Any

import pytest

from recall.operator.scaling.decide import (
    DELETION_COST,
    DRAINED_COST,
    SAFE_TO_EVICT,
    Decision,
    Inputs,
    PodView,
    Policy,
    Reason,
    WorkerView,
    decide,
)
from recall.operator.scaling.workload import Outstanding
from recall.protocol.workers import BUSY, DRAINING, IDLE

POLICY = Policy(minimum=0, maximum=10, cooldown=60.0, step=2)
NOW = 1000.0


def fleet(
    n: int,
    *,
    busy: Collection[str] = (),
    drained: Collection[str] = (),
) -> tuple[tuple[PodView, ...], tuple[WorkerView, ...]]:
    """`n` workers w0… with ready pods; some busy, some drained (their pods unready)."""
    pods, workers = [], []
    for k in range(n):
        name = f"w{k}"
        pods.append(PodView(name, ready=name not in drained))
        if name in drained:
            workers.append(WorkerView(name, DRAINING, drain=f"r-{name}", drained=True))
        else:
            workers.append(WorkerView(name, BUSY if name in busy else IDLE))
    return tuple(pods), tuple(workers)


def inputs(
    replicas: int | None,
    queued: int = 0,
    leased: int = 0,
    *,
    n: int | None = None,
    busy: Collection[str] = (),
    drained: Collection[str] = (),
    below_since: float | None = None,
    policy: Policy = POLICY,
    **kw: Any,
) -> Inputs:
    pods, workers = fleet(replicas or 0 if n is None else n, busy=busy, drained=drained)
    return Inputs(
        policy,
        Outstanding(queued, leased),
        replicas,
        pods=pods,
        workers=workers,
        busy=frozenset(busy),
        below_since=below_since,
        **kw,
    )


def evictions(d: Decision) -> dict[str, str | None]:
    return {pod: value for pod, key, value in d.annotate if key == SAFE_TO_EVICT}


@pytest.mark.parametrize(
    ("queued", "leased", "policy", "desired"),
    [
        (0, 0, POLICY, 0),
        (3, 2, POLICY, 5),  # Queued alone would remove the two busy workers
        (40, 5, POLICY, 10),
        (0, 0, replace(POLICY, minimum=2), 2),
    ],
)
def test_desired__outstanding_work_within_min_and_max(
    queued: int, leased: int, policy: Policy, desired: int
) -> None:
    d = decide(inputs(desired, queued, leased, policy=policy), NOW)
    assert d.desired == desired
    assert d.reason is Reason.STEADY and d.replicas is None


SLOTS = replace(POLICY, maximum=5, slots=3)  # three leases a worker


@pytest.mark.parametrize(
    ("queued", "leased", "desired"),
    [
        (7, 0, 3),  # ceil(7 / 3): one job a slot, and max 5 not reached
        (4, 2, 2),  # leased jobs take slots as queued ones do
        (1, 0, 1),  # one job still needs a worker
        (6, 0, 2),  # every slot full
        (0, 0, 0),
        (30, 0, 5),  # within max
    ],
)
def test_desired__a_worker_of_slots_takes_that_many_outstanding_jobs(
    queued: int, leased: int, desired: int
) -> None:
    d = decide(inputs(desired, queued, leased, policy=SLOTS), NOW)
    assert d.desired == desired
    assert d.reason is Reason.STEADY and d.replicas is None


def test_up__with_slots_to_the_workers_the_jobs_fill_not_one_a_job() -> None:
    d = decide(inputs(1, queued=7, policy=SLOTS), NOW)
    assert (d.reason, d.replicas) == (Reason.SCALED_UP, 3)
    assert "1 → 3 workers: 7 outstanding jobs (7 queued, 0 leased)" in d.message
    assert decide(inputs(3, queued=7, policy=SLOTS), NOW).reason is Reason.STEADY


def test_down__with_slots_workers_whose_jobs_fit_in_fewer_slots_are_drained_then_removed() -> None:
    # Four workers for four leased jobs: one a job would keep them all; two workers of three
    # slots hold them.
    busy = {"w0", "w1"}
    first = decide(inputs(4, leased=4, busy=busy, policy=SLOTS), NOW)
    assert (first.reason, first.desired) == (Reason.COOLDOWN, 2)
    assert "4 workers, 2 wanted (4 outstanding jobs" in first.message
    due = decide(inputs(4, leased=4, busy=busy, below_since=NOW, policy=SLOTS), NOW + 60)
    assert due.reason is Reason.DRAINING and due.drain == ("w2", "w3")
    drained = inputs(4, leased=4, busy=busy, drained={"w2", "w3"}, below_since=0.0, policy=SLOTS)
    d = decide(drained, NOW)
    assert (d.reason, d.replicas, d.removed) == (Reason.SCALED_DOWN, 2, ("w2", "w3"))
    # One job more than two workers' slots: three workers stay, one of the drained two goes.
    d = decide(replace(drained, work=Outstanding(1, 6)), NOW)
    assert (d.desired, d.replicas, d.removed) == (3, 3, ("w2",))


def test_from_zero__a_job_arriving_scales_up_at_once() -> None:
    d = decide(inputs(0, queued=1), NOW)
    assert (d.reason, d.replicas) == (Reason.SCALED_UP, 1)
    assert "0 → 1 workers: 1 outstanding jobs (1 queued, 0 leased)" in d.message


def test_up__at_once_to_the_outstanding_work_never_above_max() -> None:
    assert decide(inputs(2, queued=3, leased=2), NOW).replicas == 5
    assert decide(inputs(2, queued=300), NOW).replicas == 10


def test_down__waits_out_the_cooldown_then_drains_idle_workers_first() -> None:
    first = decide(inputs(3, leased=1, busy={"w0"}), NOW)
    assert first.reason is Reason.COOLDOWN and first.below_since == NOW
    assert first.replicas is None and not first.drain
    later = decide(inputs(3, leased=1, busy={"w0"}, below_since=NOW), NOW + 59)
    assert later.reason is Reason.COOLDOWN and not later.drain
    due = decide(inputs(3, leased=1, busy={"w0"}, below_since=NOW), NOW + 60)
    assert due.reason is Reason.DRAINING
    assert due.drain == ("w1", "w2"), "the idle ones, never the busy w0"
    assert due.replicas is None, "nothing is removed before it drained"


def test_down__only_drained_unready_workers_let_the_count_go_down() -> None:
    waiting = inputs(3, leased=1, busy={"w0"}, below_since=0.0)
    pods, workers = fleet(3, busy={"w0"})
    # w1 answered drained but the kubelet has not seen it unready yet: wait
    w1 = WorkerView("w1", DRAINING, drain="r1", drained=True)
    still_ready = replace(waiting, workers=(workers[0], w1, workers[2]))
    d = decide(still_ready, NOW)
    assert d.reason is Reason.DRAINING and d.replicas is None
    assert d.drain == ("w2",)
    unready = replace(still_ready, pods=(pods[0], PodView("w1", ready=False), pods[2]))
    d = decide(unready, NOW)
    assert (d.reason, d.replicas, d.removed) == (Reason.SCALED_DOWN, 2, ("w1",))
    assert (("w1", DELETION_COST, DRAINED_COST)) in d.annotate
    assert "3 → 2 workers" in d.message


def test_down__a_few_at_a_time_and_to_zero() -> None:
    everyone = {f"w{k}" for k in range(5)}
    d = decide(inputs(5, drained=everyone, below_since=0.0), NOW)
    assert (d.reason, d.replicas, len(d.removed)) == (Reason.SCALED_DOWN, 3, 2)
    d = decide(inputs(2, drained={"w0", "w1"}, below_since=0.0), NOW)
    assert d.replicas == 0, "to zero when nothing is left"


def test_down__never_below_min() -> None:
    policy = replace(POLICY, minimum=1)
    d = decide(inputs(2, drained={"w0", "w1"}, below_since=0.0, policy=policy), NOW)
    assert d.replicas == 1 and len(d.removed) == 1


def test_refused__an_hpa_scales_the_deployment_nothing_is_written_drains_cancelled() -> None:
    d = decide(
        inputs(
            3, drained={"w2"}, below_since=0.0, refused_by="HorizontalPodAutoscaler recall-worker"
        ),
        NOW,
    )
    assert d.reason is Reason.REFUSED
    assert d.replicas is None and not d.drain and not d.annotate
    assert d.undrain == ("w2",)
    assert "HorizontalPodAutoscaler recall-worker" in d.message


def test_stale__holds_the_last_decision_no_blind_drop_to_zero() -> None:
    d = decide(inputs(4, below_since=0.0, stale="the job informer is not current"), NOW)
    assert d.reason is Reason.STALE
    assert d.replicas is None and not d.drain and not d.undrain and not d.annotate
    assert d.below_since is None, "the cooldown starts again once the inputs are current"
    assert "holding 4 workers" in d.message


def test_missing_deployment__nothing_to_do() -> None:
    d = decide(inputs(None, queued=3), NOW)
    assert d.reason is Reason.MISSING and d.replicas is None


def test_settling__no_further_step_while_a_removal_is_pending() -> None:
    # The count is 2 but 3 pods live: the ReplicaSet is about to remove one.
    d = decide(inputs(2, n=3, drained={"w2"}, below_since=0.0), NOW)
    assert d.reason is Reason.SETTLING
    assert d.replicas is None and not d.drain and not d.undrain


def test_rollout__holds_scale_downs_but_not_scale_ups() -> None:
    assert decide(inputs(3, below_since=0.0, rollout=True), NOW).reason is Reason.ROLLOUT
    assert decide(inputs(3, queued=5, rollout=True), NOW).replicas == 5


def test_work_returns__drains_are_cancelled_once_no_removal_is_pending() -> None:
    settled = decide(inputs(3, queued=3, drained={"w2"}), NOW)
    assert settled.reason is Reason.STEADY and settled.undrain == ("w2",)
    assert ("w2", DELETION_COST, None) not in settled.annotate  # it never had our cost
    pending = decide(inputs(2, queued=3, n=3, drained={"w2"}), NOW)
    assert pending.replicas == 3
    assert pending.undrain == (), "w2 may be the pod the ReplicaSet is removing"


def test_answers__a_busy_answer_or_none_in_time_is_let_go_and_another_asked() -> None:
    base = inputs(3, below_since=0.0, policy=replace(POLICY, step=1))
    refused = WorkerView("w1", BUSY, drain="r1", refused=True)
    silent = WorkerView("w2", IDLE, drain="r2", waited=31.0, patience=30.0)
    d = decide(replace(base, workers=(base.workers[0], refused, silent)), NOW)
    assert set(d.undrain) == {"w1", "w2"}
    assert d.drain == ("w0",)


def test_terminating_drained_pods__are_left_drained() -> None:
    pods, workers = fleet(3, drained={"w2"})
    gone = (pods[0], pods[1], replace(pods[2], terminating=True))
    d = decide(replace(inputs(2, queued=2), pods=gone, workers=workers), NOW)
    assert "w2" not in d.undrain


def test_pods_created_elsewhere_blocked__scale_down_deletes_nothing_undrained() -> None:
    # 10 asked for, only 6 pods exist (a quota): lowering to 8 removes no pod.
    d = decide(inputs(10, n=6, below_since=0.0), NOW)
    assert (d.reason, d.replicas, d.removed) == (Reason.SCALED_DOWN, 8, ())


def test_annotations__safe_to_evict_follows_busy_and_the_lowest_cost_drained() -> None:
    d = decide(inputs(3, leased=1, busy={"w0"}), NOW)
    assert evictions(d) == {"w0": "false", "w1": "true", "w2": "true"}
    pods, workers = fleet(2, drained={"w1"})
    marked = (
        replace(pods[0], annotations=((SAFE_TO_EVICT, "true"), (DELETION_COST, DRAINED_COST))),
        replace(pods[1], annotations=((SAFE_TO_EVICT, "true"),)),
    )
    d = decide(replace(inputs(2), pods=marked, workers=workers), NOW)
    assert ("w0", DELETION_COST, None) in d.annotate, "ours, on a worker no longer drained"
    assert ("w1", DELETION_COST, DRAINED_COST) in d.annotate
    off = decide(inputs(3, busy={"w0"}, policy=replace(POLICY, mark_pods=False)), NOW)
    assert off.annotate == ()


def _random_inputs(rng: random.Random) -> Inputs:
    n = rng.randint(0, 8)
    replicas = max(0, n + rng.randint(-2, 2))
    pods, workers = [], []
    busy = set()
    for k in range(n):
        name = f"w{k}"
        is_busy = rng.random() < 0.4
        asked = rng.random() < 0.4
        drained = asked and rng.random() < 0.6 and not is_busy
        refused = asked and not drained and rng.random() < 0.5
        if is_busy:
            busy.add(name)
        ready = not drained if rng.random() < 0.8 else rng.random() < 0.5
        if is_busy and rng.random() < 0.2:
            ready = False  # a busy worker starting up, or with a failing probe
        terminating = rng.random() < 0.1
        pods.append(PodView(name, ready=ready, terminating=terminating))
        state = DRAINING if drained else (BUSY if is_busy else rng.choice([IDLE, None]))
        workers.append(
            WorkerView(
                name,
                state,
                drain=f"r{k}" if asked else None,
                drained=drained,
                refused=refused,
                waited=rng.uniform(0, 60),
            )
        )
    return Inputs(
        replace(POLICY, step=rng.randint(1, 4), minimum=rng.randint(0, 2), slots=rng.randint(1, 3)),
        Outstanding(rng.randint(0, 4), len(busy)),
        replicas,
        pods=tuple(pods),
        workers=tuple(workers),
        busy=frozenset(busy),
        rollout=rng.random() < 0.1,
        below_since=rng.choice([None, 0.0, NOW - 10]),
    )


def test_randomized__no_decision_lets_the_replicaset_remove_a_busy_worker() -> None:
    """Whatever the fleet looks like, a scale-down lowers the count by no more than the drained,
    unready pods can absorb (the ReplicaSet removes those before any ready or costlier pod),
    never below desired, and never counts on a busy worker."""
    rng = random.Random(11)
    downs = 0
    for _ in range(20_000):
        i = _random_inputs(rng)
        d = decide(i, NOW)
        assert set(d.drain).isdisjoint(i.busy), d
        assert set(d.removed).isdisjoint(i.busy), d
        if d.replicas is None or i.replicas is None or d.replicas >= i.replicas:
            continue
        downs += 1
        live = [p for p in i.pods if not p.terminating]
        assert len(live) <= i.replicas, "no step while a removal is pending"
        assert d.replicas >= d.desired
        drained = {w.name for w in i.workers if w.drained}
        absorbing = {p.name for p in live if p.name in drained and not p.ready}
        assert len(live) - d.replicas <= len(absorbing), (i, d)
        assert set(d.removed) <= absorbing
        assert not set(d.undrain) & set(d.removed)
    assert downs > 500
