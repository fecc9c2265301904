"""Events out on the memory store with a hand-driven clock: ids, signatures, address checks,
the records (at most two writes per event), retries past the backoff cap, the Batch's event
and its item counts, the TTL waiting for events, leadership."""

from __future__ import annotations

import ipaddress
import json
import threading
from typing import Any

import pytest

from recall.cli.notify import gone, resend
from recall.operator.notify import events
from recall.operator.notify.notifier import Notifier
from recall.operator.notify.send import Sender, classify
from recall.operator.notify.settings import NotifySettings
from recall.operator.notify.sign import HEADER, sign, verify
from recall.operator.notify.state import Gate, Owed, Try, answered, holds
from recall.operator.notify.transport import Answer, Outcome, refused
from recall.operator.reconcile.cache import JobCache
from recall.operator.reconcile.record import JobRecord
from recall.resources import LABEL_BATCH, LABEL_INDEX, Published, is_true
from recall.resources.batch import Batch
from recall.resources.job import Sink
from recall_dev.twin.api import MemoryApi
from recall_dev.twin.clock import FakeClock
from tests.helpers import complete_with_transcript
from tests.unit.fakes import NS, Operator, batch_manifest, claim, job_manifest, result_of

KEY = b"k1"
URL = "https://sink.example/events"


class FakeSender(Sender):
    """Answers from a script (the last answer repeats); keeps what it was sent."""

    def __init__(self, *answers: Outcome) -> None:
        super().__init__()
        self.answers = list(answers) or [Outcome.DELIVERED]
        self.sent: list[tuple[str, dict[str, Any], str]] = []

    def post(self, url: str, headers: dict[str, str], body: bytes) -> Answer:
        self.sent.append((url, json.loads(body), headers[HEADER]))
        outcome = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return Answer(outcome, status=200 if outcome is Outcome.DELIVERED else 503, error="x")


def notifier(
    store: MemoryApi, clock: FakeClock, sender: Sender, batches: Any = dict, **kw: Any
) -> Notifier:
    cache = JobCache(clock)
    leading = threading.Event()
    leading.set()
    settings = NotifySettings(backoff_initial=1, backoff_cap=8, backoff_jitter=0, **kw)
    n = Notifier(
        store,
        cache,
        leading=leading,
        batches=batches,
        settings=settings,
        clock=clock,
        sender=sender,
    )
    cache.relisted(iter(store.list_jobs(NS).items))
    return n


def sync(n: Notifier, store: MemoryApi) -> None:
    n.cache.relisted(iter(store.list_jobs(NS).items))


def finished_job(store: MemoryApi, clock: FakeClock, name: str) -> None:
    store.create_job(
        NS, job_manifest(name, notify=[{"url": URL, "secretRef": {"name": "s", "key": "hmac"}}])
    )
    h = claim(store, clock, name)
    h.complete(result_of(h))
    job = store.get_job(NS, name)
    assert job is not None
    published = Published(time=clock.now())
    store.patch_job_status(NS, name, None, {"published": published.to_api()})


def test_sign__two_keys_while_rotating_and_a_window() -> None:
    body = b'{"id":"x"}'
    header = sign(body, [b"old", b"new"], 1000)
    assert verify(header, body, [b"new"], now=1100)
    assert verify(header, body, [b"old"], now=1100)
    assert not verify(header, body, [b"other"], now=1100)
    assert not verify(header, body + b" ", [b"old"], now=1100)
    assert not verify(header, body, [b"old"], now=1000 + 301)  # outside the window: a replay


def test_refused__loopback_link_local_metadata_unless_allowed() -> None:
    for a in (
        "127.0.0.1",
        "::1",
        "169.254.169.254",
        "fe80::1",
        "100.100.100.200",
        "0.0.0.0",
        "::ffff:127.0.0.1",
        "fd00:ec2::254",
    ):
        assert refused(ipaddress.ip_address(a), []) is not None, a
    assert refused(ipaddress.ip_address("10.1.2.3"), []) is None
    allow = [ipaddress.ip_network("127.0.0.1/32")]
    assert refused(ipaddress.ip_address("127.0.0.1"), allow) is None
    assert refused(ipaddress.ip_address("127.0.0.2"), allow) is not None
    assert [classify(s) for s in (200, 204, 307, 400, 404, 408, 429, 500, 503)] == [
        "delivered",
        "delivered",
        "refused",
        "refused",
        "refused",
        "unavailable",
        "unavailable",
        "unavailable",
        "unavailable",
    ]


def test_event__stable_id_and_bytes_and_no_transcript_text() -> None:
    store, clock = MemoryApi(), FakeClock()
    finished_job(store, clock, "j")
    job = store.get_job(NS, "j")
    assert job is not None
    a = events.job_event(job, events.JOB_SUCCEEDED, ["s3://out/j.json"])
    b = events.job_event(job, events.JOB_SUCCEEDED, ["s3://out/j.json"])
    assert a == b and a.id == events.event_id(job.metadata.uid or "", events.JOB_SUCCEEDED)
    body = json.loads(a.body)
    assert body["specversion"] == "1.0" and body["type"] == "dev.recall.job.succeeded"
    assert body["data"]["outputs"] == ["s3://out/j.json"]
    assert set(body["data"]["result"]) <= {
        "transcript",
        "words",
        "durationSeconds",
        "language",
        "engine",
        "model",
    }


def test_notifier__a_sink_down_past_the_cap_then_up__two_writes_and_one_id() -> None:
    store, clock = MemoryApi(), FakeClock()
    store.put_secret(NS, "s", {"hmac": KEY, "hmac.next": b"k2"})
    finished_job(store, clock, "j")
    sender = FakeSender(*[Outcome.UNAVAILABLE] * 12, Outcome.DELIVERED)
    n = notifier(store, clock, sender)
    writes = len([c for c in store.calls if c == ("patch_job_status", "j")])
    for _ in range(40):
        n.run_once()
        clock.step(8)  # the cap: every pass after the first few retries
        sync(n, store)
        job = store.get_job(NS, "j")
        assert job is not None
        if job.status.notified and job.status.notified.time:
            break
    job = store.get_job(NS, "j")
    assert job is not None and job.status.notified is not None
    assert job.status.notified.time is not None and job.status.notified.delivered == [URL]
    assert job.status.notified.attempts == 13
    assert is_true(job.status.conditions, "Notified")
    assert len({body["id"] for _, body, _ in sender.sent}) == 1
    assert all(verify(h, b"", [b"k2"], 0) is False for _, _, h in sender.sent)  # signed bodies
    assert all(h.count("v1=") == 2 for _, _, h in sender.sent)  # both keys while rotating
    assert len([c for c in store.calls if c == ("patch_job_status", "j")]) - writes == 2


def test_notifier__refused_event_given_up_after_bounded_tries_with_a_warning() -> None:
    store, clock = MemoryApi(), FakeClock()
    store.put_secret(NS, "s", {"hmac": KEY})
    finished_job(store, clock, "j")
    sender = FakeSender(Outcome.REFUSED)
    n = notifier(store, clock, sender, max_refusals=3)
    for _ in range(10):
        n.run_once()
        clock.step(8)
    job = store.get_job(NS, "j")
    assert job is not None and job.status.notified is not None
    assert job.status.notified.given_up == [URL] and job.status.notified.time is not None
    assert len(sender.sent) == 3
    assert [e["reason"] for e in store.events if e["type"] == "Warning"] == ["NotifyGivenUp"]


def test_notifier__missing_key_sends_nothing_and_says_so() -> None:
    store, clock = MemoryApi(), FakeClock()
    finished_job(store, clock, "j")
    sender = FakeSender()
    n = notifier(store, clock, sender)
    n.run_once()
    n.run_once()
    assert sender.sent == []
    job = store.get_job(NS, "j")
    assert job is not None and job.status.notified is not None
    assert [c.reason for c in job.status.conditions if c.type == "Notified"] == ["KeyMissing"]
    assert [e["reason"] for e in store.events] == ["NotifyKeyMissing"]
    delivered_once_keyed(store, clock, n, sender.sent, KEY)


def delivered_once_keyed(
    store: MemoryApi, clock: FakeClock, n: Notifier, sent: list[Any], key: bytes
) -> None:
    """Job `j`'s event, waiting for its key, goes out once the key is in its Secret."""
    store.put_secret(NS, "s", {"hmac": key})
    clock.step(30)
    n.run_once()
    n.run_once()
    job = store.get_job(NS, "j")
    assert job is not None and job.status.notified is not None and job.status.notified.time
    assert len(sent) == 1


def test_notifier__a_standby_sends_nothing() -> None:
    store, clock = MemoryApi(), FakeClock()
    store.put_secret(NS, "s", {"hmac": KEY})
    finished_job(store, clock, "j")
    sender = FakeSender()
    n = notifier(store, clock, sender)
    n.leading.clear()
    n.run_once()
    assert sender.sent == []
    n.leading.set()
    n.run_once()
    assert len(sender.sent) == 1


def one_succeeded_one_failed(store: MemoryApi, clock: FakeClock, sink: dict[str, Any]) -> Operator:
    """A Batch `b` of two items, notifying `sink`: `a` succeeded (published), `c` failed."""
    store.create_batch(
        NS, batch_manifest("b", ["a", "c"], notify=[sink], ttlSecondsAfterFinished=0)
    )
    op = Operator(store, clock)
    op.controller.held = lambda b: holds(b, [])  # as the runtime wires it
    op.tick()
    complete_with_transcript(claim(store, clock, "b-a"), op.results)
    h = claim(store, clock, "b-c")
    h.fail("SourceNotFound", "gone", permanent=True, backoff_base=1, backoff_cap=1)
    for _ in range(3):
        op.tick()
    return op


def delivering(store: MemoryApi, clock: FakeClock, op: Operator) -> tuple[Notifier, FakeSender]:
    """A notifier wired to `op`'s controller as the runtime wires it, after four passes."""
    sender = FakeSender()
    n = Notifier(
        store,
        op.controller.cache,
        leading=op.controller.leading,
        batches=op.controller.batches,
        settings=NotifySettings(),
        clock=clock,
        sender=sender,
    )
    for _ in range(4):
        n.run_once()
        op.tick()
    return n, sender


def test_notifier__batch_items_then_the_batch_event_with_counts_and_the_ttl_waits() -> None:
    store, clock = MemoryApi(), FakeClock()
    store.put_secret(NS, "s", {"hmac": KEY})
    sink = {"url": URL, "secretRef": {"name": "s", "key": "hmac"}}
    op = one_succeeded_one_failed(store, clock, sink)
    batch = store.get_batch(NS, "b")
    assert batch is not None and batch.status.complete
    assert holds(batch, [])
    _, sender = delivering(store, clock, op)
    types = sorted(body["type"] for _, body, _ in sender.sent)
    assert types == [
        "dev.recall.batch.completed",
        "dev.recall.batch.item.failed",
        "dev.recall.batch.item.succeeded",
    ]
    completed = next(b for _, b, _ in sender.sent if b["type"] == "dev.recall.batch.completed")
    assert completed["data"]["counts"] == {"total": 2, "completed": 1, "failed": 1, "cancelled": 0}
    batch = store.get_batch(NS, "b")
    assert batch is not None and batch.status.notified is not None
    assert batch.status.notified.time is not None
    assert batch.status.notified.items is not None
    assert (batch.status.notified.items.delivered, batch.status.notified.items.pending) == (2, 0)
    assert not holds(batch, [])
    assert is_true(batch.status.conditions, "Notified")
    assert is_true(batch.status.conditions, "Complete")  # the projection kept both
    op.tick()  # settled (items.delivered above: the jobs' records): the TTL deletes the jobs
    assert store.get_job(NS, "b-a") is None


def test_answered__jitter_never_stretches_a_retry_past_the_cap() -> None:
    backoff = NotifySettings(backoff_cap=8, backoff_jitter=0.5).backoff
    sink = Sink.model_validate({"url": URL, "secretRef": {"name": "s", "key": "hmac"}})
    gate, t = Gate(), Try(sink, NS)
    for i in range(30):  # the sink down: past the cap from the 4th retry on
        t.sent = 100.0 + 10 * i  # each retry sent after the last failure
        answered(t, gate, Answer(Outcome.UNAVAILABLE, error="x"), t.sent, backoff, 5)
        assert gate.at - t.sent <= 8
    assert gate.failures == 30
    refused_try = Try(sink, NS)
    for _ in range(30):
        answered(refused_try, Gate(), Answer(Outcome.REFUSED, error="x"), 100.0, backoff, 99)
        assert refused_try.at - 100.0 <= 8


def test_settings__a_cap_under_a_second_is_accepted_as_the_chart_allows() -> None:
    settings = NotifySettings(backoff_cap=0.5)
    assert (settings.backoff.initial, settings.backoff.cap) == (0.5, 0.5)
    assert NotifySettings().backoff.initial == 1.0


def test_event__a_batch_without_completed_at_sends_the_same_bytes_on_every_try() -> None:
    raw = batch_manifest("b", ["a"])
    raw["metadata"]["uid"] = "u1"
    raw["status"] = {
        "conditions": [
            {
                "type": "Complete",
                "status": "True",
                "reason": "Done",
                "message": "",
                "lastTransitionTime": "2026-12-04T18:00:00Z",
            }
        ]
    }
    batch = Batch.from_api(raw)
    first = events.batch_event(batch)
    assert events.batch_event(batch) == first
    assert json.loads(first.body)["time"].startswith("2026-12-04T18:00:00")


def test_resend__a_batch_whose_ttl_deleted_the_jobs_says_its_item_events_are_gone() -> None:
    store, clock = MemoryApi(), FakeClock()
    store.create_batch(NS, batch_manifest("b", ["a", "c", "d"]))
    record = {
        "id": "e1",
        "attempts": 1,
        "delivered": [URL],
        "time": "2026-12-01T00:00:00Z",
        "items": {"delivered": 1, "givenUp": 2, "pending": 0, "givenUpIndexes": "1-2"},
    }
    store.patch_batch_status(NS, "b", None, {"notified": record})
    assert gone(store, NS, "batch/b") == 2  # the TTL deleted every job
    job = job_manifest("b-c", batchRef="b", item="c")
    job["metadata"]["labels"] = {LABEL_BATCH: "b"}
    store.create_job(NS, job)
    h = claim(store, clock, "b-c")
    h.fail("SourceNotFound", "gone", permanent=True, backoff_base=1, backoff_cap=1)
    given_up = {"id": "e2", "attempts": 5, "givenUp": [URL], "time": "2026-12-01T00:00:00Z"}
    store.patch_job_status(NS, "b-c", None, {"notified": given_up})
    assert gone(store, NS, "batch/b") == 1  # one job is still there: it can be resent
    assert resend(store, NS, "batch/b") == ["job/b-c", "batch/b"]
    assert gone(store, NS, "job/b-c") == 0


SINK = {"url": URL, "secretRef": {"name": "s", "key": "hmac"}}
COMPLETE = {
    "type": "Complete",
    "status": "True",
    "reason": "Done",
    "message": "",
    "lastTransitionTime": "2026-12-04T18:00:00Z",
}


def failed_items(store: MemoryApi, clock: FakeClock, batch: str, n: int, **spec: Any) -> None:
    """A complete Batch of `n` failed items (their jobs labelled as the Batch's)."""
    store.create_batch(NS, batch_manifest(batch, [f"i{i}" for i in range(n)], **spec))
    for i in range(n):
        job = job_manifest(f"{batch}-{i}", batchRef=batch, item=f"i{i}")
        job["metadata"]["labels"] = {LABEL_BATCH: batch, LABEL_INDEX: str(i)}
        store.create_job(NS, job)
        h = claim(store, clock, f"{batch}-{i}")
        h.fail("SourceNotFound", "gone", permanent=True, backoff_base=1, backoff_cap=1)
    store.patch_batch_status(NS, batch, None, {"conditions": [COMPLETE]})


def known(store: MemoryApi, *names: str) -> Any:
    def batches() -> dict[tuple[str, str], Batch]:
        found = {(NS, n): store.get_batch(NS, n) for n in names}
        return {k: b for k, b in found.items() if b is not None}

    return batches


def test_notifier__finished_jobs_no_sink_wants_are_never_read() -> None:
    store, clock = MemoryApi(), FakeClock()
    store.put_secret(NS, "s", {"hmac": KEY})
    for i in range(4):
        store.create_job(NS, job_manifest(f"j{i}"))
        h = claim(store, clock, f"j{i}")
        h.fail("SourceNotFound", "gone", permanent=True, backoff_base=1, backoff_cap=1)
    failed_items(store, clock, "b", 3)  # a Batch without sinks
    finished_job(store, clock, "wanted")
    sender = FakeSender()
    n = notifier(store, clock, sender, batches=known(store, "b"))
    before = len(store.calls)
    for _ in range(2):  # a term, a leader change, another term
        n.run_once()
        n.run_once()
        n.leading.clear()
        n.run_once()
        n.leading.set()
    read = [name for op, name in store.calls[before:] if op == "get_job"]
    assert read.count("wanted") == 2  # once a term (the cache is not told it settled)
    assert set(read) == {"wanted"}
    assert [body["subject"] for _, body, _ in sender.sent] == ["wanted"]


def test_notifier__a_pass_looks_at_what_changed_not_at_every_item(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store, clock = MemoryApi(), FakeClock()
    store.put_secret(NS, "s", {"hmac": KEY})
    failed_items(store, clock, "b", 120, notify=[SINK])
    sender = FakeSender()
    n = notifier(store, clock, sender, batches=known(store, "b"), in_flight=4)
    walked: list[tuple[str, str]] = []
    looked = [0]
    batch_jobs, settled = n.cache.batch_jobs, Owed.settled

    def spy(batch: tuple[str, str]) -> dict[tuple[str, str], JobRecord]:
        walked.append(batch)
        return batch_jobs(batch)

    def counted(o: Owed) -> bool:
        looked[0] += 1
        return bool(settled.fget(o))  # type: ignore[attr-defined]

    monkeypatch.setattr(n.cache, "batch_jobs", spy)
    monkeypatch.setattr(Owed, "settled", property(counted))
    n.run_once()  # the term's first pass loads 120 item events and the Batch's
    for _ in range(100):
        if not n.pending():
            break
        looked[0] = 0
        n.run_once()
        assert looked[0] <= 4 * 4, looked[0]  # what it sent and recorded, not 120
        sync(n, store)
    assert walked == []
    batch = store.get_batch(NS, "b")
    assert batch is not None and batch.status.notified is not None
    assert batch.status.notified.time is not None and batch.status.notified.items is not None
    items = batch.status.notified.items
    assert (items.delivered, items.given_up, items.pending) == (120, 0, 0)
    assert len(sender.sent) == 121


def test_deletion__waits_for_the_notifier_to_load_and_for_the_batch_event() -> None:
    store, clock = MemoryApi(), FakeClock()
    store.put_secret(NS, "s", {"hmac": KEY})
    sink = {**SINK, "types": ["dev.recall.batch.completed"]}
    failed_items(store, clock, "b", 2, notify=[sink])
    sender = FakeSender(Outcome.UNAVAILABLE, Outcome.UNAVAILABLE, Outcome.DELIVERED)
    n = notifier(store, clock, sender, batches=known(store, "b"), delete_seconds=60)
    batch = store.get_batch(NS, "b")
    assert batch is not None
    assert n.deletion_pending(batch)  # restarted: nothing is known of what is owed yet
    n.run_once()
    assert n.deletion_pending(batch)  # batch.completed owed, its sink down
    for _ in range(10):
        clock.step(8)
        n.run_once()
    batch = store.get_batch(NS, "b")
    assert batch is not None and batch.status.notified is not None and batch.status.notified.time
    assert not n.deletion_pending(batch)
    assert [body["type"] for _, body, _ in sender.sent] == ["dev.recall.batch.completed"] * 3


def test_deletion__waits_delete_seconds_at_most() -> None:
    store, clock = MemoryApi(), FakeClock()
    store.put_secret(NS, "s", {"hmac": KEY})
    failed_items(store, clock, "b", 2, notify=[SINK])
    n = notifier(store, clock, FakeSender(Outcome.UNAVAILABLE), batches=known(store, "b"))
    batch = store.get_batch(NS, "b")
    assert batch is not None
    n.run_once()
    assert n.deletion_pending(batch)
    clock.step(299)
    n.run_once()
    assert n.deletion_pending(batch)
    clock.step(1)
    assert not n.deletion_pending(batch)
