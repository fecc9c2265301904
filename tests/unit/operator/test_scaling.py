"""The built-in autoscaler's writes (`scaling.scaler.Scaler`) on the memory store: the
scale subresource and its fence, the refusal, the hold, the drain through the registration
Lease, and a fleet (tests/unit/operator/fleet.py) scaled up and down many times without a busy
worker ever being stopped."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

import pytest

from recall.kube import ScalerRef
from recall.operator.dispatch import ReadyQueue
from recall.operator.peers.registry import Registry
from recall.operator.reconcile.cache import JobCache
from recall.operator.scaling.decide import (
    DELETION_COST,
    DRAINED_COST,
    SAFE_TO_EVICT,
    Policy,
    Reason,
    decide,
)
from recall.operator.scaling.scaler import STATUS_ANNOTATION, Report, Scaler, Sources, Target
from recall.operator.scaling.workload import Workload
from recall.protocol.workers import SELECTOR, lease_name, read, with_drain
from recall.worker.drain import Drain
from recall.worker.registration import Registration
from recall_dev.twin.api import MemoryApi
from recall_dev.twin.clock import FakeClock
from tests.unit.fakes import NS, Leader, job_manifest
from tests.unit.operator.fleet import DEPLOYMENT, LABELS, ReplicaSet, phases

POLICY = Policy(minimum=0, maximum=6, cooldown=5.0, step=2)


@dataclass
class Sim:
    """The operator's views, its scaler, and a fleet, on one hand-driven clock."""

    store: MemoryApi
    clock: FakeClock
    cache: JobCache
    ready: ReadyQueue
    workload: Workload
    registry: Registry
    rs: ReplicaSet
    scaler: Scaler
    durations: dict[str, float]
    downs: int = 0
    ticks: int = 0
    most: int = 0

    @classmethod
    def make(cls, policy: Policy = POLICY, replicas: int = 0) -> Sim:
        store, clock = MemoryApi(), FakeClock()
        store.put_deployment(NS, DEPLOYMENT, replicas, LABELS)
        cache, ready, workload = JobCache(clock), ReadyQueue(clock), Workload()
        cache.listeners += [ready.update, workload.update]
        registry = Registry(clock)
        sim = cls(
            store, clock, cache, ready, workload, registry, ReplicaSet(store, clock),
            None,  # type: ignore[arg-type]
            {},
        )  # fmt: skip
        sim.scaler = sim.new_scaler(policy)
        return sim

    def new_scaler(self, policy: Policy = POLICY, leader: Leader | None = None) -> Scaler:
        sources = Sources(self.workload, self.registry, self.ready.busy)
        return Scaler(
            self.store, Target(NS, DEPLOYMENT, "simulated"), policy, sources, leader,
            identity="op", clock=self.clock,
        )  # fmt: skip

    def sync(self) -> None:
        self.cache.relisted(iter(self.store.list_jobs(NS).items))
        self.registry.relisted(iter(self.store.list_leases(NS, SELECTOR).items))

    def submit(self, prefix: str, n: int, rng: random.Random) -> None:
        for k in range(n):
            name = f"{prefix}-{k}"
            self.store.create_job(NS, job_manifest(name, leaseDurationSeconds=60))
            self.durations[name] = rng.uniform(2, 25)

    def tick(self, scaler: Scaler | None = None) -> Report:
        self.ticks += 1
        self.clock.step(1)
        self.rs.kubelet()
        for w in list(self.rs.workers.values()):
            w.step(self.durations)
            if self.ticks % 2 == 0 and w.started and not w.stopping:
                w.registration.renew_once()
        self.sync()
        report = (scaler or self.scaler).run_once()
        d = report.decision
        if report.scaled is not None and d is not None and report.scaled < (d.current or 0):
            self.downs += 1
        self.rs.reconcile()
        self.most = max(self.most, len(self.rs.live()))
        return report

    def run_until_idle(self, limit: int = 400) -> None:
        """Tick until every job ended and the fleet is back at zero."""
        for _ in range(limit):
            self.tick()
            counts = phases(self.store)
            if not counts.get("Queued") and not counts.get("Leased") and not self.rs.live():
                return
        raise AssertionError(f"not idle after {limit} ticks: {phases(self.store)}")

    def releases_and_reclaims(self) -> tuple[int, int]:
        jobs = self.store.list_jobs(NS).items
        return (
            sum(int((o.get("status") or {}).get("releases") or 0) for o in jobs),
            sum(int((o.get("status") or {}).get("expiredLeases") or 0) for o in jobs),
        )


def status(store: MemoryApi) -> dict[str, object]:
    deployment = store.get_deployment(NS, DEPLOYMENT)
    assert deployment is not None
    raw = (deployment["metadata"].get("annotations") or {}).get(STATUS_ANNOTATION)
    assert raw, "the status annotation is written"
    out: dict[str, object] = json.loads(raw)
    return out


def events(store: MemoryApi, reason: str) -> list[str]:
    return [str(e["message"]) for e in store.events if e["reason"] == reason]


# -- single rounds -----------------------------------------------------------------------------


def test_scale_up__from_zero_through_the_scale_subresource_with_an_event_and_the_status() -> None:
    sim = Sim.make()
    sim.submit("a", 3, random.Random(1))
    sim.sync()
    first = sim.scaler.run_once()
    assert first.scaled is None, "a term's first write is the status annotation (the fence)"
    report = sim.scaler.run_once()
    assert report.scaled == 3 and sim.rs.replicas() == 3
    assert events(sim.store, "ScaledUp") == [
        "0 → 3 workers: 3 outstanding jobs (3 queued, 0 leased)"
    ]
    s = status(sim.store)
    assert (s["desired"], s["current"], s["reason"]) == (3, 3, "ScaledUp")
    assert s["conditions"] == [
        {"type": "AbleToScale", "status": "True", "reason": "ScaledUp", "message": s["message"]}
    ]


def test_scale_up__a_pool_of_slots_gets_a_worker_per_slots_outstanding_jobs() -> None:
    sim = Sim.make(policy=Policy(minimum=0, maximum=5, cooldown=5.0, step=2, slots=3))
    sim.submit("a", 7, random.Random(1))
    sim.sync()
    sim.scaler.run_once()  # the term's status annotation
    report = sim.scaler.run_once()
    assert report.scaled == 3 and sim.rs.replicas() == 3, "ceil(7 / 3), not 7 capped at 5"
    assert events(sim.store, "ScaledUp") == [
        "0 → 3 workers: 7 outstanding jobs (7 queued, 0 leased)"
    ]
    assert (status(sim.store)["desired"], status(sim.store)["current"]) == (3, 3)


def test_fence__a_deposed_leaders_scale_write_read_before_the_takeover_is_refused() -> None:
    sim = Sim.make(replicas=3)
    sim.sync()
    old_leader = Leader()
    old = sim.new_scaler(leader=old_leader)
    old.run_once()  # its term's fence
    sim.submit("a", 5, random.Random(1))
    sim.sync()
    inputs, deployment = old.observe()  # it reads, and freezes before its write
    decision = decide(inputs, sim.clock.monotonic())
    assert decision.replicas == 5
    new = sim.new_scaler()
    new.run_once()  # the new leader's first write moves the resourceVersion
    report = old.apply(decision, deployment)
    assert report.conflict and report.scaled is None
    old_leader.leading = False
    assert old.run_once() == Report(), "a replica that does not lead writes nothing"


def test_refused__an_hpa_on_the_deployment__event_and_condition_and_no_write() -> None:
    sim = Sim.make(replicas=2)
    sim.store.put_autoscaler(
        ScalerRef("HorizontalPodAutoscaler", "workers-hpa", "Deployment", DEPLOYMENT)
    )
    sim.submit("a", 5, random.Random(1))
    sim.sync()
    for _ in range(3):
        report = sim.scaler.run_once()
        assert report.scaled is None
    assert sim.rs.replicas() == 2
    assert report.decision is not None and report.decision.reason is Reason.REFUSED
    refused = events(sim.store, "ScalingRefused")
    assert len(refused) == 1 and "HorizontalPodAutoscaler workers-hpa" in refused[0]
    s = status(sim.store)
    assert s["conditions"][0]["status"] == "False"  # type: ignore[index]
    assert s["conditions"][0]["reason"] == "Refused"  # type: ignore[index]


def test_stale__a_view_not_current_holds_the_count_with_an_event() -> None:
    sim = Sim.make(replicas=4)
    sim.scaler.sources.stale = lambda: "the job informer is not current"
    sim.scaler.below_since = 0.0  # long below: a blind scaler would drop to zero now
    for _ in range(3):
        sim.tick()
    assert sim.rs.replicas() == 4
    assert events(sim.store, "ScalingHeld") == [
        "holding 4 workers: the job informer is not current"
    ]


def test_drain__asked_through_the_lease_answered_by_the_worker_then_removed_unready() -> None:
    sim = Sim.make(policy=Policy(minimum=0, maximum=6, cooldown=0.0, step=1), replicas=1)
    sim.tick()  # a pod, its worker starts
    sim.tick()
    (name,) = sim.rs.workers
    worker = sim.rs.workers[name]
    reasons = []
    for _ in range(6):
        report = sim.tick()
        assert report.decision is not None
        reasons.append(report.decision.reason)
        lease = sim.store.get_lease(NS, lease_name(name))
        if lease is not None and read(lease).drained:
            assert worker.drain.draining() and not worker.ready()
    assert Reason.DRAINING in reasons and Reason.SCALED_DOWN in reasons
    assert sim.rs.removed == [name] and worker.stopped_busy == 0
    assert events(sim.store, "Draining") and events(sim.store, "ScaledDown")


def test_pods__busy_marked_not_safe_to_evict_drained_with_the_lowest_deletion_cost() -> None:
    sim = Sim.make(policy=Policy(minimum=0, maximum=6, cooldown=3.0, step=1))
    sim.durations["long"] = 30.0
    sim.store.create_job(NS, job_manifest("long", leaseDurationSeconds=60))
    sim.store.create_job(NS, job_manifest("short", leaseDurationSeconds=60))
    sim.durations["short"] = 1.0
    seen_cost = False
    for _ in range(20):
        sim.tick()
        for pod in sim.store.list_pods(NS, "app=workers"):
            meta = pod["metadata"]
            worker = sim.rs.workers[meta["name"]]
            marks = meta.get("annotations") or {}
            if worker.holder is not None and SAFE_TO_EVICT in marks and sim.ticks > 6:
                assert marks[SAFE_TO_EVICT] == "false"
            seen_cost |= marks.get(DELETION_COST) == DRAINED_COST
    assert seen_cost, "the drained worker's pod had the lowest deletion cost before it went"


# -- the fleet ---------------------------------------------------------------------------------


def test_fleet__twenty_scale_downs_in_waves_stop_no_busy_worker() -> None:
    """Waves of jobs of 2 to 25 s; each wave scales the fleet up at once and back to zero after
    the cooldown, two at a time, while the last jobs of the wave still run (and, every other
    wave, while the next wave arrives). No scale-down stops a busy worker: no SIGTERM finds
    one holding a job, no job is released or reclaimed."""
    sim = Sim.make()
    rng = random.Random(7)
    wave = 0
    while sim.downs < 20:
        wave += 1
        sim.submit(f"w{wave}", rng.randint(4, 9), rng)
        if wave % 2 == 0:
            for _ in range(rng.randint(20, 40)):  # into the next wave's scale-down
                sim.tick()
            sim.submit(f"w{wave}b", rng.randint(1, 4), rng)
        sim.run_until_idle()
        assert wave < 20, "twenty scale-downs take fewer waves"
    assert sim.rs.busy_removed() == 0
    assert sim.releases_and_reclaims() == (0, 0)
    assert set(phases(sim.store)) == {"Failed"}, "every job ran to its end (the fleet's 'done')"
    assert sim.most <= POLICY.maximum
    assert len(sim.rs.removed) >= 20


@pytest.mark.parametrize("at", [3, 12, 25])
def test_fleet__a_new_leader_mid_scale_down_neither_loses_nor_doubles_workers(at: int) -> None:
    sim = Sim.make()
    rng = random.Random(at)
    sim.submit("a", 6, rng)
    while sim.rs.replicas() < 6:
        sim.tick()
    peak = sim.rs.replicas()
    ticks = 0
    while sim.downs == 0:  # up to the first scale-down
        sim.tick()
        ticks += 1
    old_leader = Leader()
    old = sim.scaler
    old.leadership = old_leader
    for _ in range(at):
        sim.tick(old)
    old_leader.leading = False  # deposed
    sim.scaler = sim.new_scaler()
    sim.submit("b", 3, rng)  # work arrives during the takeover
    sim.run_until_idle()
    assert sim.most <= peak, "never more pods than the most ever asked for"
    assert sim.rs.busy_removed() == 0
    assert sim.releases_and_reclaims() == (0, 0)
    assert set(phases(sim.store)) == {"Failed"}


def test_registry__a_drain_request_is_news_not_a_renewal_and_ends_offers() -> None:
    store, clock = MemoryApi(), FakeClock()
    registry = Registry(clock)
    Registration(store, NS, "w1", "simulated", drain=Drain("w1", wait=0.0)).renew_once()
    registry.relisted(iter(store.list_leases(NS, SELECTOR).items))
    assert [s.worker for s in registry.offerable(clock.monotonic())] == ["w1"]
    clock.step(10)
    lease = store.get_lease(NS, lease_name("w1"))
    assert lease is not None
    store.replace_lease(NS, lease_name("w1"), with_drain(lease, "r1"))
    registry.relisted(iter(store.list_leases(NS, SELECTOR).items))
    (seen,) = registry.alive(clock.monotonic())
    assert seen.drain == "r1" and seen.observed_at == clock.monotonic() - 10, "no sign of life"
    assert registry.offerable(clock.monotonic()) == []
    clock.step(6)
    assert registry.alive(clock.monotonic()) == [], "the request did not keep it alive"
