"""The operator's side of the results store, on the memory store and a results store in memory:
publish once for the accepted result (the second record), heal a crash between the two, the
Batch complete only once published, the TTL, and the garbage of deleted jobs and Batches."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from recall.bucket import StoreAccessDenied, StoreBucketMissing
from recall.kube import Unavailable
from recall.media.types import Cutting, Segment
from recall.operator.results.publish import Probes
from recall.resources import Phase, is_true
from recall.transcripts import AttemptWriter, index_key, load_transcript
from recall.worker.holder import LeaseHolder
from recall_dev.twin.api import Fault, MemoryApi
from recall_dev.twin.clock import FakeClock
from tests.unit.fakes import NS, Operator, batch_manifest, claim, memory_bucket

OUTPUT = {"url": "memory://out/talks/{key}", "formats": ["srt", "txt"]}


def setup(keys: list[str], **spec: object) -> tuple[MemoryApi, FakeClock, Operator]:
    store, clock = MemoryApi(), FakeClock()
    store.create_batch(NS, batch_manifest("b", keys, **spec))
    op = Operator(store, clock)
    op.tick()
    return store, clock, op


def work(op: Operator, h: LeaseHolder, text: str = "hello there") -> AttemptWriter:
    """What a worker writes, then its complete."""
    w = AttemptWriter(op.results, h.known, h.attempt, h.token)
    w.begin(Cutting(30, 2, 16000, "x"), None)
    from recall.media.types import Chunk

    w.add(
        Chunk(index=0, start=0, duration=30, first=0, end=480_000),
        [Segment(start=0, end=1, text=text)],
    )
    output = h.known.spec.output
    w.finish(30.0, "simulated", list(output.formats) if output else [])
    from recall.resources import Result

    h.complete(Result(transcript=w.transcript_key, worker=h.worker, words=2))
    return w


def batch(store: MemoryApi):  # type: ignore[no-untyped-def]
    found = store.get_batch(NS, "b")
    assert found is not None
    return found


def test_publish__outputs_and_the_index_for_the_accepted_result_then_one_record() -> None:
    store, clock, op = setup(["a"], defaults={"engine": {"name": "simulated"}, "output": OUTPUT})
    w = work(op, claim(store, clock, "b-a"))
    op.tick()
    op.tick()
    job = store.get_job(NS, "b-a")
    assert job is not None and job.status.published is not None
    assert job.status.published.formats == ["srt", "txt"]
    out = op.results.stores.open("memory://out/talks")
    assert out.get("a.srt") == op.results.get(w.directory + "out.srt")
    assert out.get("a.txt") == b"hello there\n"
    uid = batch(store).metadata.uid or ""
    entry = load_transcript(op.results, index_key(NS, "b", uid, "a"))
    assert entry is not None and entry.text == "hello there"
    # The chunk records and the cutting are gone; the result's transcript and outputs stay.
    left = sorted(o.key.rsplit("/", 1)[1] for o in op.results.list("scratch/"))
    assert left == ["out.srt", "out.txt", "transcript.json"]
    status = batch(store).status
    assert status.counts is not None and status.counts.published == 1
    assert status.complete and is_true(status.conditions, "Published")
    writes = [c for c in store.calls if c == ("patch_job_status", "b-a")]
    op.tick()
    assert [c for c in store.calls if c == ("patch_job_status", "b-a")] == writes  # once


def test_publish__a_crash_between_the_copies_and_the_record_is_healed() -> None:
    store, clock, op = setup(["a"], defaults={"engine": {"name": "simulated"}, "output": OUTPUT})
    work(op, claim(store, clock, "b-a"))
    # The record's write is lost twice (as a crash after the copies would leave it).
    store.inject(
        Fault(
            "patch_job_status",
            Unavailable("connection reset"),
            times=2,
            when=lambda args: "published" in args["patch"],
        )
    )
    op.tick()
    job = store.get_job(NS, "b-a")
    assert job is not None and job.status.published is None
    assert not batch(store).status.complete  # not before the publish is recorded
    assert "Publishing" in {c.reason for c in batch(store).status.conditions}
    clock.step(5)
    for _ in range(6):
        clock.step(2)
        op.tick()
    job = store.get_job(NS, "b-a")
    assert job is not None and job.status.published is not None
    assert batch(store).status.complete
    out = op.results.stores.open("memory://out/talks")
    assert out.get("a.srt") is not None


def test_publish__a_refusing_output_store_is_retried_and_the_batch_says_why() -> None:
    store, clock, op = setup(["a"], defaults={"engine": {"name": "simulated"}, "output": OUTPUT})
    work(op, claim(store, clock, "b-a"))
    real = op.results.copy_to
    refused = {"n": 0}

    def copy_to(key: str, target, target_key: str) -> None:  # type: ignore[no-untyped-def]
        if target.url.startswith("memory://out") and refused["n"] < 1:
            refused["n"] += 1
            raise StoreAccessDenied("put memory://out/talks/a.srt: access denied")
        real(key, target, target_key)

    op.results.copy_to = copy_to  # type: ignore[method-assign]
    op.tick()
    op.tick()
    cond = next(c for c in batch(store).status.conditions if c.type == "StorageFailing")
    assert (cond.status, cond.reason) == ("True", "StorageAccessDenied")
    assert any(e["reason"] == "StorageAccessDenied" for e in store.events)
    clock.step(301)  # a refusal is tried again every five minutes
    op.tick()
    op.tick()
    job = store.get_job(NS, "b-a")
    assert job is not None and job.status.published is not None
    cond = next(c for c in batch(store).status.conditions if c.type == "StorageFailing")
    assert cond.status == "False"


def test_ttl__deletes_the_finished_jobs_and_the_status_and_index_stay() -> None:
    store, clock, op = setup(["a", "b"], ttlSecondsAfterFinished=60)
    for name in ("b-a", "b-b"):
        work(op, claim(store, clock, name))
    op.tick()
    op.tick()
    before = batch(store).status
    assert before.complete
    clock.step(30)
    op.tick()
    assert len(store.list_jobs(NS).items) == 2  # not yet
    clock.step(31)
    op.tick()
    op.tick()
    assert store.list_jobs(NS).items == []
    after = batch(store).status
    assert after.counts == before.counts and after.completed_indexes == before.completed_indexes
    assert after.attention == before.attention
    uid = batch(store).metadata.uid or ""
    assert load_transcript(op.results, index_key(NS, "b", uid, "a")) is not None
    # The deleted jobs' objects go; their entries in the index stay with the Batch.
    assert list(op.results.list("scratch/")) == []
    assert any(e["reason"] == "JobsDeleted" for e in store.events)


def test_a_deleted_batch_takes_its_index_and_leaves_the_outputs() -> None:
    store, clock, op = setup(["a"], defaults={"engine": {"name": "simulated"}, "output": OUTPUT})
    work(op, claim(store, clock, "b-a"))
    op.tick()
    op.tick()
    found = batch(store)
    op.controller.cancel_batch(found)
    op.tick()
    op.tick()
    assert list(op.results.list("index/b")) == []
    assert list(op.results.list("index/")) == [] or all(
        o.key == "index/.probe" for o in op.results.list("index/")
    )
    assert list(op.results.list("scratch/")) == []
    assert op.results.stores.open("memory://out/talks").get("a.srt") is not None


def test_sweep__removes_what_a_job_that_no_longer_exists_or_a_zombie_left() -> None:
    store, clock, op = setup(["a"])
    h = claim(store, clock, "b-a")
    work(op, h)
    op.tick()
    op.tick()
    # A zombie of attempt 1 writes late, and an object of a job long gone is found.
    late = AttemptWriter(op.results, h.known, h.attempt, "e" * 32)
    late.begin(Cutting(30, 2, 16000, "x"), None)
    op.results.put(f"scratch/{NS}/gone/uid-9/a1-{'d' * 32}/c000000.json", b"{}")
    op.controller.results.collector.sweep()
    keys = sorted(o.key for o in op.results.list("scratch/"))
    assert all("/gone/" not in k and ("e" * 32) not in k for k in keys), keys
    job = store.get_job(NS, "b-a")
    assert job is not None and job.status.result is not None
    assert job.status.result.transcript in keys  # never what the result references


@pytest.mark.parametrize("phase", [Phase.FAILED, Phase.CANCELLED])
def test_an_ended_jobs_objects_go(phase: Phase) -> None:
    store, clock, op = setup(["a"])
    h = claim(store, clock, "b-a")
    w = AttemptWriter(op.results, h.known, h.attempt, h.token)
    w.begin(Cutting(30, 2, 16000, "x"), None)
    if phase is Phase.FAILED:
        h.fail("SourceNotFound", "gone", permanent=True, backoff_base=1, backoff_cap=1)
    else:
        op.controller.cancel_batch(batch(store))
    op.tick()
    op.tick()
    assert list(op.results.list(w.directory)) == []


def test_results_in_memory_fixture_is_fresh() -> None:
    assert list(memory_bucket().list()) == []


def test_readiness_names_the_reason_whichever_call_found_the_store_refusing() -> None:
    _, _, op = setup(["a"])
    results = op.controller.results

    def denied(*_: object, **__: object) -> None:
        raise StoreAccessDenied("memory://results/: access denied")

    results.bucket.put = denied  # type: ignore[method-assign]
    assert (results.probe() or "").startswith("StorageAccessDenied: ")
    results.collector.sweep = denied  # type: ignore[method-assign,assignment]
    results.sweep_seconds = 0.0
    assert results.run_once().errors
    assert (results.reachable or "").startswith("StorageAccessDenied: ")


def test_probes__a_leader_whose_first_probe_failed_probes_again_with_backoff() -> None:
    """The fresh-install hang: a leading operator probed once at start, before the bundled
    store had its bucket, and never again. It probes until the store answers."""
    probes = Probes(every=30.0)
    assert probes.due(0.0, reachable=None)  # at start
    probes.done(0.0, "StorageBucketMissing: no bucket")
    waits: list[float] = []
    t = 0.0
    while len(waits) < 7:
        t += 0.5
        if probes.due(t, reachable="StorageBucketMissing: no bucket"):
            waits.append(t)
            probes.done(t, "StorageBucketMissing: no bucket")
    gaps = [round(b - a, 1) for a, b in zip([0.0, *waits], waits, strict=False)]
    assert gaps == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    probes.done(t, None)
    assert not probes.due(t + 29, reachable=None)
    assert probes.due(t + 30, reachable=None), "then every 30 s, leader or standby"


def test_probes__a_pass_that_found_the_store_unreachable_makes_the_probe_due_at_once() -> None:
    probes = Probes(every=30.0)
    probes.done(0.0, None)
    assert not probes.due(1.0, reachable=None)
    assert probes.due(1.0, reachable="StorageUnavailable: refused")


def test_readiness__a_leader_started_before_its_store_gets_ready_without_a_restart() -> None:
    """The results thread itself: the bucket is missing at first (the store is still making
    it), then appears; readiness follows within the backoff, and the refused sweep is not
    asked again at every pass meanwhile."""
    _, clock, op = setup(["a"])
    results = op.controller.results
    missing = {"on": True}
    calls = {"put": 0, "sweep": 0}
    real_put, real_sweep = results.bucket.put, results.collector.sweep

    def put(*args: Any, **kwargs: Any) -> None:
        calls["put"] += 1
        if missing["on"]:
            raise StoreBucketMissing("memory://results/: no such bucket")
        real_put(*args, **kwargs)

    def sweep() -> int:
        calls["sweep"] += 1
        if missing["on"]:
            raise StoreBucketMissing("memory://results/: no such bucket")
        return real_sweep()

    results.bucket.put = put  # type: ignore[method-assign]
    results.collector.sweep = sweep  # type: ignore[method-assign]
    stop = threading.Event()
    thread = threading.Thread(target=results.run, args=(stop, 0.005), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while results.reachable is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (results.reachable or "").startswith("StorageBucketMissing")
        for _ in range(40):  # 20 s of the operator's clock, in 0.5 s steps
            clock.step(0.5)
            time.sleep(0.01)
        assert 3 <= calls["put"] <= 8, calls  # probes at 0, 1, 3, 7, 15 s: backoff
        assert calls["sweep"] <= 8, calls  # not once per pass (there were hundreds)
        missing["on"] = False
        deadline = time.monotonic() + 10
        while results.reachable is not None and time.monotonic() < deadline:
            clock.step(0.5)
            time.sleep(0.01)
        assert results.reachable is None, "ready once the bucket exists, without a restart"
    finally:
        stop.set()
        results.wake()
        thread.join(5)
