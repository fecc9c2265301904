"""The controller on the memory store, tick by tick with a hand-driven clock: fan-out,
projection, reclaim, heals, backoff, exhaustion, suspension, uncovered jobs."""

from __future__ import annotations

import json
import time

import pytest

from recall.base.settings import OperatorSettings
from recall.kube import Conflict, Invalid, Unavailable
from recall.kube.verbs import CONFIG_MAPS
from recall.operator.peers.leader import Sole
from recall.operator.reconcile.apply import CREATE_SECONDS
from recall.operator.reconcile.project import CODES, stored_phases
from recall.operator.reconcile.record import JobRecord
from recall.resources import Batch, ItemPhase, Phase, indexes, is_true
from recall_dev.twin.api import Fault, MemoryApi
from recall_dev.twin.clock import FakeClock
from tests.helpers import complete_with_transcript
from tests.unit.fakes import (
    NS,
    Operator,
    batch_manifest,
    claim,
    job_manifest,
    result_of,
)


def setup(keys: list[str], **spec: object) -> tuple[MemoryApi, FakeClock, Operator]:
    store, clock = MemoryApi(), FakeClock()
    store.create_batch(NS, batch_manifest("b", keys, **spec))
    op = Operator(store, clock)
    return store, clock, op


def phases(store: MemoryApi) -> dict[str, ItemPhase]:
    batch = store.get_batch(NS, "b")
    assert batch is not None
    codes = stored_phases(batch.status, len(batch.spec.items))
    return {it.key: CODES[codes[i]] for i, it in enumerate(batch.spec.items)}


def events(store: MemoryApi, reason: str) -> list[str]:
    return [e["message"] for e in store.events if e["reason"] == reason]


def assert_healed_once(store: MemoryApi, key: str, phase: str) -> None:
    """Batch b counted one heal, said in one Healed Event, and its item `key` is `phase`."""
    batch = store.get_batch(NS, "b")
    assert batch is not None and batch.status.heals == 1
    assert phases(store)[key] == phase
    assert len(events(store, "Healed")) == 1


def test_fan_out__one_job_per_item_then_the_status() -> None:
    store, _, op = setup(["a", "b", "c"])
    op.tick()
    jobs = {j["metadata"]["name"]: j for j in store.list_jobs(NS).items}
    assert sorted(jobs) == ["b-a", "b-b", "b-c"]
    labels = jobs["b-c"]["metadata"]["labels"]
    assert (labels["recall.dev/batch"], labels["recall.dev/item"], labels["recall.dev/index"]) == (
        "b",
        "c",
        "2",
    )
    assert jobs["b-a"]["spec"]["maxAttempts"] == 3
    batch = store.get_batch(NS, "b")
    assert batch is not None and batch.status.counts is not None
    assert (batch.status.counts.total, batch.status.counts.queued) == (3, 3)
    assert any(c.type == "JobsCreated" and c.status == "True" for c in batch.status.conditions)


def test_fan_out__creates_for_its_budget_in_a_tick_and_the_rest_at_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The creation budget runs on the controller's clock: each create here takes 0.4 of it,
    so a tick creates three jobs (the third ends past the budget) and says there is more."""
    store, clock, op = setup([f"i{n}" for n in range(7)])
    create = store.create_job

    def slow_create(namespace: str, manifest: dict[str, object]) -> object:
        clock.step(CREATE_SECONDS * 0.4)
        return create(namespace, manifest)

    monkeypatch.setattr(store, "create_job", slow_create)
    counts = []
    for _ in range(3):
        reports = op.tick()
        counts.append(len(store.list_jobs(NS).items))
        more = any(r.more for r in reports)
        assert more == (counts[-1] < 7), counts
    assert counts == [3, 6, 7]
    assert set(phases(store).values()) == {ItemPhase.QUEUED}


def test_projection__follows_claims_and_completions_as_index_ranges() -> None:
    store, clock, op = setup(["a", "b", "c"])
    op.tick()
    h = claim(store, clock, "b-b")
    op.tick()
    batch = store.get_batch(NS, "b")
    assert batch is not None and batch.status.transcribing_indexes == "1"
    h.complete(result_of(h))
    op.tick()
    assert phases(store) == {"a": "queued", "b": "completed", "c": "queued"}
    batch = store.get_batch(NS, "b")
    assert batch is not None and batch.status.completed_indexes == "1"
    assert (batch.status.heals or 0) == 0


def test_reclaim__job_and_item_back_to_queued_in_one_tick() -> None:
    store, clock, op = setup(["a"])
    op.tick()
    claim(store, clock, "b-a")
    op.tick()
    assert phases(store)["a"] == "transcribing"
    clock.step(9.9)
    op.tick()
    job = store.get_job(NS, "b-a")
    assert job is not None and job.status.phase == Phase.LEASED  # 9.9 s < the 10 s lease
    clock.step(0.2)
    reports = op.tick()
    job = store.get_job(NS, "b-a")
    assert job is not None
    assert (job.status.phase, job.status.expired_leases) == (Phase.QUEUED, 1)
    assert phases(store)["a"] == "queued"
    report = next(r for r in reports if r.reclaimed)
    assert report.status_written
    assert events(store, "Reclaimed")
    (reclaimed,) = report.reclaimed  # how late, for the log: 0.1 s past the observed expiry
    assert (reclaimed.job, reclaimed.phase) == ("b-a", Phase.QUEUED)
    assert reclaimed.overdue == pytest.approx(0.1, abs=1e-6)
    assert reclaimed.since_renewal == pytest.approx(10.1, abs=1e-3)


def test_reclaim__never_a_lease_renewed_in_time() -> None:
    store, clock, op = setup(["a"])
    op.tick()
    h = claim(store, clock, "b-a")
    for _ in range(10):
        clock.step(5.0)
        h.renew()
        op.tick()
    job = store.get_job(NS, "b-a")
    assert job is not None and job.status.phase == Phase.LEASED and job.status.expired_leases == 0


def test_reclaim__jobs_without_a_live_batch_too() -> None:
    store, clock = MemoryApi(), FakeClock()
    op = Operator(store, clock)
    store.create_job(NS, job_manifest("solo"))
    store.create_job(NS, job_manifest("orphan", batchRef="gone", item="x"))
    for name in ("solo", "orphan"):
        claim(store, clock, name)
    op.tick()
    clock.step(11)
    op.tick()
    for name in ("solo", "orphan"):
        job = store.get_job(NS, name)
        assert job is not None and job.status.phase == Phase.QUEUED, name
        assert job.status.expired_leases == 1


def test_heal__counted_once_with_one_event() -> None:
    store, clock, op = setup(["a", "b"])
    op.tick()
    batch = store.get_batch(NS, "b")
    assert batch is not None
    # An operator crashed after writing that item b is transcribing; its job never was claimed.
    store.patch_batch_status(NS, "b", None, {"transcribingIndexes": "1"})
    op2 = Operator(store, clock)  # a new operator: no marks
    op2.tick()
    op2.tick()
    op2.tick()
    assert_healed_once(store, "b", "queued")


def test_heal__counted_when_a_restarted_operator_publishes_before_it_projects() -> None:
    store, clock, op = setup(["a"])
    op.tick()
    h = claim(store, clock, "b-a")
    op.tick()
    assert phases(store)["a"] == "transcribing"
    # The job completes; its operator dies before projecting it (nor publishes it).
    complete_with_transcript(h, op.results)
    op2 = Operator(store, clock, results=op.results)  # a new operator: no marks
    op2.sync()
    op2.controller.results.run_once()  # its publish record lands first
    job = store.get_job(NS, "b-a")
    assert job is not None and job.status.published is not None
    op2.sync()  # the publish is a change of the job, not of the item's phase
    op2.controller.run_once()
    assert_healed_once(store, "a", "completed")


def test_status_write_failure__keeps_the_change_for_the_next_tick() -> None:
    store, clock, op = setup(["a"])
    op.tick()
    claim(store, clock, "b-a")
    store.inject(Fault("patch_batch_status", Unavailable("503")))
    op.tick()
    assert phases(store)["a"] == "queued"  # not written yet
    op.tick()
    assert phases(store)["a"] == "transcribing"
    batch = store.get_batch(NS, "b")
    assert batch is not None and (batch.status.heals or 0) == 0  # an update, not a heal


def test_status__right_although_the_batch_copy_lags_and_others_write_it() -> None:
    store, clock, op = setup(["a"])
    op.tick()
    op.batches_follow = False  # from now on the controller's copy of the Batch is old
    h = claim(store, clock, "b-a")
    op.tick()
    assert phases(store)["a"] == "transcribing"
    h.release()
    op.tick()
    assert phases(store)["a"] == "queued"
    store.inject(Fault("patch_batch_status", Conflict("409"), times=0))  # none: no RV is sent
    claim(store, clock, "b-a")
    op.tick()  # back to what the old copy said: a diff from it would write nothing
    assert phases(store)["a"] == "transcribing"
    batch = store.get_batch(NS, "b")
    assert batch is not None and (batch.status.heals or 0) == 0


def test_backoff__ended_by_the_operator_clock_only() -> None:
    store, clock, op = setup(["a"])
    op.tick()
    h = claim(store, clock, "b-a")
    h.fail("Timeout", "m", permanent=False, backoff_base=4, backoff_cap=4)  # 2..4 s
    op.tick()
    job = store.get_job(NS, "b-a")
    assert job is not None and job.status.backoff_seconds is not None
    wait = job.status.backoff_seconds
    clock.step(wait - 0.1)
    op.tick()
    job = store.get_job(NS, "b-a")
    assert job is not None and job.status.backoff_seconds == wait
    clock.step(0.2)
    op.tick()
    job = store.get_job(NS, "b-a")
    assert job is not None and job.status.backoff_seconds is None


def test_exhausted_job__failed_by_the_operator() -> None:
    store, clock = MemoryApi(), FakeClock()
    op = Operator(store, clock)
    # One attempt, no free releases: a release leaves the job Queued with its budget spent.
    store.create_job(NS, job_manifest("spent", maxAttempts=1, maxReleases=0))
    claim(store, clock, "spent").release()
    op.tick()
    job = store.get_job(NS, "spent")
    assert job is not None and job.status.phase == Phase.FAILED
    assert any(c.reason == "AttemptsExhausted" for c in job.status.conditions)


def test_suspend__labels_the_jobs_and_resume_removes_it() -> None:
    store, _, op = setup(["a", "b"], suspend=True)
    op.tick()
    assert all(
        j["metadata"]["labels"].get("recall.dev/suspended") == "true"
        for j in store.list_jobs(NS).items
    )


def test_missing_job__recreated_as_a_heal_but_not_a_finished_one() -> None:
    store, clock, op = setup(["a", "b"])
    op.tick()
    h = claim(store, clock, "b-a")
    h.complete(result_of(h))
    op.tick()
    store.delete_job(NS, "b-a")
    store.delete_job(NS, "b-b")
    clock.step(31)  # the next full reconcile
    op.tick()
    names = sorted(j["metadata"]["name"] for j in store.list_jobs(NS).items)
    assert names == ["b-b"]
    batch = store.get_batch(NS, "b")
    assert batch is not None and batch.status.heals == 1
    assert "b-b" in events(store, "Healed")[0]


def test_items_from_a_list__numbered_after_the_inline_ones() -> None:
    store, clock = MemoryApi(), FakeClock()
    store.create_config_map(
        NS, "more", {"items": "# a list\nfile:///m/x.wav\nkey-y file:///m/y.wav\n"}, labels={}
    )
    manifest = batch_manifest("b", ["a"])
    manifest["spec"]["itemsFrom"] = [{"configMap": "more"}]
    store.create_batch(NS, manifest)
    Operator(store, clock).tick()
    labels = {
        j["metadata"]["name"]: j["metadata"]["labels"]["recall.dev/index"]
        for j in store.list_jobs(NS).items
    }
    assert labels == {"b-a": "0", "b-00001": "1", "b-key-y": "2"}


def test_invalid_items__reported_not_fanned_out() -> None:
    store, clock = MemoryApi(), FakeClock()
    manifest = batch_manifest("b", ["a"])
    manifest["spec"]["itemsFrom"] = [{"configMap": "absent"}]
    store.create_batch(NS, manifest)
    Operator(store, clock).tick()
    assert store.list_jobs(NS).items == []
    batch = store.get_batch(NS, "b")
    assert batch is not None
    assert any(c.reason == "ItemsInvalid" for c in batch.status.conditions)
    assert events(store, "ItemsInvalid")


def list_batch(keys: list[str]) -> tuple[MemoryApi, FakeClock, Operator]:
    """Batch b, its items only in ConfigMap "list", fanned out."""
    store, clock = MemoryApi(), FakeClock()
    lines = "\n".join(f"{k} file:///m/{k}.wav" for k in keys)
    store.create_config_map(NS, "list", {"items": lines}, labels={})
    manifest = batch_manifest("b", [])
    manifest["spec"] = {"itemsFrom": [{"configMap": "list"}]}
    store.create_batch(NS, manifest)
    op = Operator(store, clock)
    op.tick()
    return store, clock, op


def test_items_from__a_list_deleted_after_completion_changes_no_status() -> None:
    store, clock, op = list_batch(["a", "b", "c"])
    for key in "abc":
        complete_with_transcript(claim(store, clock, f"b-{key}"), op.results)
    op.tick()
    op.tick()  # the results published, then projected
    before = store.get_batch(NS, "b")
    assert before is not None and is_true(before.status.conditions, "Complete")
    store.verbs.delete(CONFIG_MAPS, NS, "list")
    op2 = Operator(store, clock, results=op.results)  # a new operator: the items unresolved
    for _ in range(3):
        op2.tick()
        clock.step(OperatorSettings().reconcile_interval)
    after = store.get_batch(NS, "b")
    assert after is not None and after.status.counts == before.status.counts
    assert after.status.completed_indexes == "0-2"
    assert is_true(after.status.conditions, "Complete")
    assert not after.status.heals and not events(store, "Healed")
    assert events(store, "ItemsInvalid")  # said once, as an Event


def test_items_from__a_list_unreadable_once_changes_no_status() -> None:
    store, clock, op = list_batch(["a", "b", "c", "d"])
    complete_with_transcript(claim(store, clock, "b-a"), op.results)
    claim(store, clock, "b-b")
    op.tick()
    op.tick()
    before = store.get_batch(NS, "b")
    assert before is not None and before.status.counts is not None
    assert (before.status.counts.total, before.status.counts.completed) == (4, 1)
    store.inject(Fault("get_config_map", Unavailable("503")))
    op2 = Operator(store, clock, results=op.results)  # a new leader's first read fails
    op2.tick()
    mid = store.get_batch(NS, "b")
    assert mid is not None and mid.status.counts == before.status.counts
    assert mid.status.transcribing_indexes == "1"
    clock.step(OperatorSettings().reconcile_interval)
    op2.tick()  # a full reconcile, the list read again
    after = store.get_batch(NS, "b")
    assert after is not None and after.status.counts == before.status.counts
    assert not after.status.heals and not events(store, "Healed")


def test_large_batch__status_stays_small() -> None:
    store, clock = MemoryApi(), FakeClock()
    lines = "\n".join(f"file:///media/{i}.wav" for i in range(5000))
    store.create_config_map(NS, "list", {"items": lines}, labels={})
    manifest = batch_manifest("b", [])
    manifest["spec"] = {"itemsFrom": [{"configMap": "list"}], "defaults": {"maxAttempts": 2}}
    store.create_batch(NS, manifest)
    op = Operator(store, clock, max_creates_per_tick=5000)
    for _ in range(100):  # one apply creates for 0.3 s at most; the fan-out goes on next tick
        op.tick()
        if len(store.list_jobs(NS).items) == 5000:
            break
    assert len(store.list_jobs(NS).items) == 5000
    for name in [f"b-{i:05d}" for i in range(0, 5000, 2)]:
        claim(store, clock, name)  # every other item: the worst pattern for ranges
    op.tick()
    batch = store.get_batch(NS, "b")
    assert batch is not None and batch.status.counts is not None
    assert batch.status.counts.transcribing == 2500
    assert indexes.count(batch.status.transcribing_indexes) == 2500
    size = len(json.dumps(batch.status.to_api()))
    assert size < 30_000, size


def test_cleanup__a_failed_jobs_objects_are_deleted_from_the_store() -> None:
    from recall.media.types import Cutting
    from recall.transcripts import AttemptWriter

    store, clock, op = setup(["a"])
    op.tick()
    h = claim(store, clock, "b-a")
    # What the worker wrote before failing for good.
    writer = AttemptWriter(op.results, h.known, h.attempt, h.token)
    writer.begin(Cutting(30, 2, 16000, "x"), None)
    op.results.put("scratch/notes.txt", b"not ours")
    op.tick()
    assert [o.key for o in op.results.list(writer.directory)]  # still leased: kept
    h.fail("SourceNotFound", "gone", permanent=True, backoff_base=1, backoff_cap=1)
    op.tick()
    op.tick()
    assert not list(op.results.list(writer.directory))
    assert op.results.get("scratch/notes.txt") == b"not ours"  # not a key the store writes


def project_as_a_completion_lands(*, before_read: bool) -> tuple[MemoryApi, FakeClock, Operator]:
    """Items a and b claimed, the cache has seen b's claim; then one projection, during which
    a's completion reaches the cache just before it reads the jobs, or just after."""
    store, clock, op = setup(["a", "b"])
    op.tick()
    h = claim(store, clock, "b-a")
    op.tick()
    claim(store, clock, "b-b")
    op.sync()  # the cache saw b's claim: the Batch has a change to project
    h.complete(result_of(h))  # a's completion is not in the cache yet
    cache = op.controller.cache
    read = cache.batch_jobs

    def around(batch: tuple[str, str]) -> dict[tuple[str, str], JobRecord]:
        if before_read:
            op.sync()
        jobs = read(batch)
        if not before_read:
            op.sync()
        return jobs

    cache.batch_jobs = around  # type: ignore[method-assign]
    op.controller.run_once()
    cache.batch_jobs = read  # type: ignore[method-assign]
    return store, clock, op


def assert_no_heal_at_the_next_full_reconcile(
    store: MemoryApi, clock: FakeClock, op: Operator
) -> None:
    clock.step(31)
    op.tick()
    batch = store.get_batch(NS, "b")
    assert batch is not None and (batch.status.heals or 0) == 0
    assert not events(store, "Healed")


def test_heal__not_counted_for_a_change_that_arrives_while_projecting() -> None:
    store, clock, op = project_as_a_completion_lands(before_read=False)
    op.tick()  # a's change is still marked: projected now, not at the next full reconcile
    assert phases(store) == {"a": "completed", "b": "transcribing"}
    assert_no_heal_at_the_next_full_reconcile(store, clock, op)


def test_heal__not_counted_for_a_change_that_arrives_before_the_jobs_are_read() -> None:
    """The change lands in the cache after the projection took its mark's sequence number but
    before it read the jobs: the projection sees the new phase, and it is a change."""
    store, clock, op = project_as_a_completion_lands(before_read=True)
    assert phases(store) == {"a": "completed", "b": "transcribing"}
    assert_no_heal_at_the_next_full_reconcile(store, clock, op)


def test_heal__not_counted_for_a_job_first_seen_in_a_list_again() -> None:
    """A job created and claimed while the watch was away is first seen in the next list: its
    claim is a change the view missed, not a status to heal. The first list still judges."""
    store, clock, op = setup(["a", "b"])
    op.sync()
    op.controller.run_once()  # creates the jobs; the view has not seen them yet
    assert phases(store) == {"a": "queued", "b": "queued"}
    claim(store, clock, "b-a")
    op.tick()
    assert phases(store)["a"] == "transcribing"  # at once, as a change
    assert_no_heal_at_the_next_full_reconcile(store, clock, op)


def test_status__a_foreign_write_is_projected_over_at_the_next_tick() -> None:
    store, clock, op = setup(["a"])
    op.tick()
    h = claim(store, clock, "b-a")
    h.complete(result_of(h))
    op.tick()
    assert phases(store)["a"] == "completed"
    # A replica that wrongly believed it led writes its stale projection.
    store.patch_batch_status(NS, "b", None, {"transcribingIndexes": "0", "completedIndexes": None})
    assert phases(store)["a"] == "transcribing"
    op.tick()
    assert phases(store)["a"] == "completed"


def test_no_write__while_the_operator_is_not_sure_it_leads() -> None:
    store, clock, op = setup(["a"])
    op.tick()
    h = claim(store, clock, "b-a")
    op.tick()  # the operator observes the lease
    op.controller.applier.leadership = Deposed()
    clock.step(11)  # the lease expired on the operator's clock
    reports = op.tick()
    job = store.get_job(NS, "b-a")
    assert job is not None and job.status.phase == Phase.LEASED
    assert phases(store)["a"] == "transcribing"
    assert any("not leading" in e for r in reports for e in r.errors)
    op.controller.applier.leadership = Sole()
    op.tick()
    job = store.get_job(NS, "b-a")
    assert job is not None and job.status.phase == Phase.QUEUED
    assert h.token != (job.status.lease.token if job.status.lease else None)


class Deposed(Sole):
    def holds(self) -> bool:
        return False


class Term(Sole):
    def __init__(self, term: int) -> None:
        self.term = term
        self.wanted = 0

    def need_term(self, at_least: int) -> None:
        self.wanted = max(self.wanted, at_least)


def written_in_term_3() -> tuple[MemoryApi, FakeClock, Operator, Batch]:
    """Batch b, its status written by the leader of term 3."""
    store, clock, op = setup(["a"])
    op.controller.applier.leadership = Term(3)
    op.tick()
    batch = store.get_batch(NS, "b")
    assert batch is not None and batch.status.operator_term == 3
    return store, clock, op, batch


def test_term__a_status_from_an_older_term_is_refused_by_the_store() -> None:
    store, clock, op, _ = written_in_term_3()
    # The previous leader (term 2), woken from a freeze, writes its stale view: refused.
    with pytest.raises(Invalid, match="operatorTerm is older"):
        store.patch_batch_status(NS, "b", None, {"operatorTerm": 2, "queuedIndexes": "0"})
    with pytest.raises(Invalid, match="operatorTerm is older"):
        store.patch_batch_status(NS, "b", None, {"operatorTerm": None})
    # The operator itself with an older term: its projection is refused, the item unchanged.
    stale = Term(2)
    op.controller.applier.leadership = stale
    op.controller.applier.status.forget()
    claim(store, clock, "b-a")
    reports = op.tick()
    assert any("operatorTerm" in e for r in reports for e in r.errors)
    assert phases(store)["a"] == "queued"


def test_term__a_leader_below_the_stored_term_takes_a_higher_one() -> None:
    store, _, op = setup(["a"])
    op.controller.applier.leadership = Term(7)
    op.tick()
    # The Lease was deleted and made again: the new leader's count restarted at 0.
    fresh = Term(0)
    fresh.holds = lambda: True  # type: ignore[method-assign]
    op.controller.applier.leadership = fresh
    op.controller.applier.status.forget()
    store.create_job(NS, job_manifest("x"))  # any change: a projection to write
    op.controller._last_full.clear()
    op.tick()
    assert fresh.wanted == 8


def test_term__the_leader_knows_its_own_status_in_a_later_version() -> None:
    _, _, op, batch = written_in_term_3()
    # Another version of the Batch (another client changed its metadata) with our status.
    meta = batch.metadata.model_copy(update={"resource_version": "9999"})
    newer = batch.model_copy(update={"metadata": meta})
    assert op.controller.applier.status.observe(newer) is False
    stale = batch.status.model_copy(update={"completed_indexes": "0", "queued_indexes": None})
    assert op.controller.applier.status.observe(newer.model_copy(update={"status": stale})) is True


def test_fan_out__a_small_batch_goes_before_a_big_one_in_the_tick() -> None:
    store, clock = MemoryApi(), FakeClock()
    store.create_batch(NS, batch_manifest("big", [f"i{i}" for i in range(50)]))
    store.create_batch(NS, batch_manifest("small", ["a", "b"]))
    op = Operator(store, clock)
    op.sync()
    reports = op.controller.run_once()
    # One create budget per tick is shared: the small Batch must not wait for the big fan-out.
    assert [r.batch[1] for r in reports if r.batch] == ["small", "big"]
    assert reports[0].created == ["small-a", "small-b"]


def test_fan_out__a_stream_of_small_batches_does_not_starve_a_big_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store, clock = MemoryApi(), FakeClock()
    create = store.create_job

    def slow_create(namespace: str, manifest: dict[str, object]) -> object:
        time.sleep(0.1)  # the tick's create budget (0.3 s) holds about three
        return create(namespace, manifest)

    monkeypatch.setattr(store, "create_job", slow_create)
    store.create_batch(NS, batch_manifest("big", [f"i{i}" for i in range(6)]))
    op = Operator(store, clock)
    for tick in range(6):
        for n in range(4):  # more small Batches than one tick's budget creates
            store.create_batch(NS, batch_manifest(f"s{tick}-{n}", ["a"]))
        op.tick()
    big = [j for j in store.list_jobs(NS).items if j["spec"].get("batchRef") == "big"]
    assert len(big) >= 3, f"the big Batch got {len(big)} jobs in 6 ticks"


def test_term__an_idle_leader_writes_no_status() -> None:
    store, _, op = setup(["a"])
    op.controller.applier.leadership = Term(3)
    op.tick()

    def version() -> str:
        batch = store.get_batch(NS, "b")
        assert batch is not None
        return batch.resource_version

    before = version()
    for _ in range(3):
        op.controller._last_full.clear()  # full reconciles, nothing changed
        op.tick()
    assert version() == before


def _batch_gauges(name: str) -> dict[str, float | None]:
    from prometheus_client import REGISTRY

    out = {
        phase.value: REGISTRY.get_sample_value(
            "recall_batch_items", {"batch": name, "phase": phase.value}
        )
        for phase in ItemPhase
    }
    out["suspended"] = REGISTRY.get_sample_value("recall_batch_suspended", {"batch": name})
    return out


def test_batch_gauges__the_leader_exports_each_batchs_items_by_phase() -> None:
    store, clock, op = setup(["a", "b", "c"])
    op.tick()
    h = claim(store, clock, "b-a")
    h.complete(result_of(h))
    claim(store, clock, "b-b")
    op.tick()
    op.tick()  # the status written in a tick is what the next one exports
    assert _batch_gauges(f"{NS}/b") == {
        "queued": 1,
        "transcribing": 1,
        "completed": 1,
        "failed": 0,
        "cancelled": 0,
        "suspended": 0,
    }
    _, _, suspended = setup(["a"], suspend=True)
    suspended.tick()
    assert _batch_gauges(f"{NS}/b")["suspended"] == 1


def test_batch_gauges__gone_with_the_batch_and_on_a_replica_that_does_not_lead() -> None:
    store, _, op = setup(["a"])
    op.tick()
    op.tick()
    assert _batch_gauges(f"{NS}/b")["queued"] == 1
    op.controller.leading.clear()
    op.tick()
    assert set(_batch_gauges(f"{NS}/b").values()) == {None}
    op.controller.leading.set()
    op.tick()
    assert _batch_gauges(f"{NS}/b")["queued"] == 1
    op.controller.forget_batch((NS, "b"))
    store.delete_batch(NS, "b")
    op.tick()
    assert set(_batch_gauges(f"{NS}/b").values()) == {None}
