"""Leader election on the memory store with a hand-driven clock: who leads, and when a leader
stops trusting that it does."""

from __future__ import annotations

from recall.operator.peers.leader import LeaderElector
from recall_dev.twin.api import MemoryApi
from recall_dev.twin.clock import FakeClock
from tests.unit.fakes import NS


def elector(store: MemoryApi, clock: FakeClock, me: str) -> LeaderElector:
    return LeaderElector(
        store,
        NS,
        "recall-operator",
        me,
        lease_duration=15,
        renew_deadline=10,
        retry_period=2,
        clock=clock,
    )


def test_one_leads__the_other_takes_over_only_after_a_full_lease() -> None:
    store, clock = MemoryApi(), FakeClock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    assert a.run_once() and not b.run_once()
    clock.step(14)
    assert not b.run_once()  # b has seen the Lease unchanged for 14 s only
    clock.step(1)
    assert b.run_once()


def test_holds__only_within_the_renew_deadline_of_the_last_renewal_sent() -> None:
    store, clock = MemoryApi(), FakeClock()
    a = elector(store, clock, "a")
    assert a.run_once() and a.holds()
    clock.step(9.9)
    assert a.holds()
    # Frozen past the deadline: `leading` is still set (the elector has not run again), but
    # the replica must not write any more.
    clock.step(0.2)
    assert a.leading.is_set() and not a.holds()
    assert a.run_once() and a.holds()  # renewed: it may write again


def test_lease_deleted__the_holder_makes_it_again_and_a_standby_waits_a_full_lease() -> None:
    store, clock = MemoryApi(), FakeClock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    assert a.run_once() and not b.run_once()
    store.delete_lease(NS, "recall-operator")
    assert not b.run_once()  # gone is not expired: a may still be leading
    assert a.run_once() and a.term == 0  # its own Lease, made again with its own term
    for _ in range(4):
        clock.step(2)
        assert a.run_once() and not b.run_once()
        assert a.holds() and not b.holds()


def test_lease_deleted_and_holder_gone__standby_takes_over_with_a_higher_term() -> None:
    store, clock = MemoryApi(), FakeClock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    assert a.run_once() and not b.run_once()
    store.delete_lease(NS, "recall-operator")
    assert not b.run_once()
    clock.step(14)
    assert not b.run_once()  # missing for 14 s only
    clock.step(1)
    assert b.run_once() and b.term == 1  # above a's term 0: a's late writes are fenced


def test_leader_steps_down_at_once_on_reading_another_holder() -> None:
    store, clock = MemoryApi(), FakeClock()
    a = elector(store, clock, "a")
    assert a.run_once() and a.holds()
    store.delete_lease(NS, "recall-operator")
    # A replica that never saw the Lease makes it at once (a first election, as client-go).
    c = elector(store, clock, "c")
    assert c.run_once()
    clock.step(2)
    assert not a.run_once() and not a.holds()  # well within a's renew deadline
