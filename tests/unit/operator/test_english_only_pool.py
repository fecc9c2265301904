"""What an English-only pool cannot do is failed by the operator without a lease: the pure
decision over the workers' registrations, and the controller on the in-memory twin (the real
API server's side of the write: tests/integration/test_english_only_pool.py)."""

from __future__ import annotations

from typing import Any

from recall.operator.dispatch import Capacity, unsupported
from recall.operator.reconcile.record import JobRecord
from recall.protocol.workers import FAILED, LOADED, EngineState
from recall.worker.registration import Registration
from recall_dev.twin.api import MemoryApi
from recall_dev.twin.clock import FakeClock
from tests.unit.fakes import NS, Operator, batch_manifest, job_manifest

TINY = "tiny.en@sha256:" + "ab" * 32
BASE = "base@sha256:" + "cd" * 32


def record(**spec: Any) -> JobRecord:
    return JobRecord.from_raw(
        {
            "metadata": {"name": "j", "namespace": NS},
            "spec": {"source": {"url": "file:///a"}, **spec},
        }
    )


def worker(
    name: str, multilingual: bool | None, engine: str = "whisper", pool: str = "default"
) -> Capacity:
    return Capacity((NS, name), engine, pool, 1, multilingual, BASE if multilingual else TINY)


def test_unsupported__only_when_every_live_worker_of_the_lane_said_english_only() -> None:
    auto, english = record(language="auto"), worker("w1", False)
    failure = unsupported(auto, [english])
    assert failure is not None and failure.permanent
    assert failure.reason == "LanguageDetectionUnsupported"
    assert f"model {TINY} is English-only" in failure.message
    assert "spec.language 'auto'" in failure.message
    translate = unsupported(record(transcript={"translate": "en"}), [english])
    assert translate is not None and translate.reason == "TranslationUnsupported"
    segment = unsupported(
        record(languageScope="segment", transcript={"translate": "en"}), [english]
    )
    assert segment is not None and segment.reason == "LanguageDetectionUnsupported"
    # What English-only models do, a multilingual or silent worker beside them, no worker, a
    # model of the job's own, another pool or engine: offered as before.
    assert unsupported(record(language="en"), [english]) is None
    assert unsupported(record(), [english]) is None
    assert unsupported(auto, [english, worker("w2", True)]) is None
    assert unsupported(auto, [english, worker("w2", None)]) is None
    assert unsupported(auto, []) is None
    assert unsupported(record(language="auto", engine={"model": "base"}), [english]) is None
    assert unsupported(auto, [worker("g", False, pool="gpu")]) is None
    assert unsupported(auto, [worker("s", False, engine="simulated")]) is None
    named = record(language="auto", engine={"name": "whisper"})
    assert unsupported(named, [english, worker("o", True, engine="openai")]) is not None


def register(store: MemoryApi, name: str, multilingual: bool | None) -> None:
    model = BASE if multilingual else TINY
    Registration(
        store,
        NS,
        name,
        "whisper",
        engine_state=lambda: EngineState(LOADED, model, multilingual=multilingual),
    ).renew_once()


def jobs(store: MemoryApi) -> dict[str, dict[str, Any]]:
    return {j["metadata"]["name"]: j["status"] for j in store.list_jobs(NS).items}


def test_controller__fails_unleased_what_an_english_only_pool_cannot_do() -> None:
    store, clock = MemoryApi(), FakeClock()
    whisper = {"engine": {"name": "whisper"}}
    store.create_job(NS, job_manifest("auto", language="auto", **whisper))
    store.create_job(NS, job_manifest("translate", transcript={"translate": "en"}, **whisper))
    store.create_job(NS, job_manifest("english", language="en", **whisper))
    register(store, "w1", multilingual=False)
    register(store, "w2", multilingual=False)
    Operator(store, clock).tick()  # each rejected when its turn to be offered comes
    status = jobs(store)
    for name, reason in (
        ("auto", "LanguageDetectionUnsupported"),
        ("translate", "TranslationUnsupported"),
    ):
        assert status[name]["phase"] == "Failed"
        assert status[name]["lastError"]["reason"] == reason
        assert status[name]["lastError"]["permanent"] is True
        assert not status[name].get("attempts") and "lease" not in status[name]
    assert status["english"]["offer"]["worker"] in {"w1", "w2"}


def test_controller__a_multilingual_worker_in_the_pool_keeps_them_offered() -> None:
    store, clock = MemoryApi(), FakeClock()
    store.create_job(NS, job_manifest("auto", language="auto", engine={"name": "whisper"}))
    register(store, "w1", multilingual=False)
    register(store, "w2", multilingual=True)
    Operator(store, clock).tick()
    assert jobs(store)["auto"]["phase"] == "Queued"
    assert jobs(store)["auto"]["offer"]["worker"] in {"w1", "w2"}


def test_controller__a_worker_whose_model_failed_to_load_keeps_them_queued() -> None:
    """w2's multilingual model did not load (yet): it is offered nothing, but what only it may
    do is not failed while it lives."""
    store, clock = MemoryApi(), FakeClock()
    store.create_job(NS, job_manifest("auto", language="auto", engine={"name": "whisper"}))
    register(store, "w1", multilingual=False)
    Registration(
        store, NS, "w2", "whisper", engine_state=lambda: EngineState(FAILED, "base")
    ).renew_once()
    Operator(store, clock).tick()
    assert jobs(store)["auto"]["phase"] == "Queued"


def test_controller__a_batch_on_an_english_only_pool_says_it_once() -> None:
    store, clock = MemoryApi(), FakeClock()
    manifest = batch_manifest("b", [f"i{i}" for i in range(4)])
    manifest["spec"]["defaults"] |= {"engine": {"name": "whisper"}, "language": "auto"}
    store.create_batch(NS, manifest)
    op = Operator(store, clock)
    op.tick()  # fan-out
    register(store, "w1", multilingual=False)
    op.tick()  # every item failed, none leased
    op.tick()  # and projected
    assert {s["phase"] for s in jobs(store).values()} == {"Failed"}
    assert all(not s.get("attempts") for s in jobs(store).values())
    batch = store.list_batches(NS)[0]
    assert batch.status.counts is not None and batch.status.counts.failed == 4
    failing = [c for c in batch.status.conditions if c.type == "ModelFailing"]
    assert len(failing) == 1 and failing[0].reason == "LanguageDetectionUnsupported"
