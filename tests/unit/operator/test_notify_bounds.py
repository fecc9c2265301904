"""Events out on the memory store, at their bounds: a deleted Batch's event given up, a record
never past the CRDs' 8 sinks (nor written again once refused), one sink failure counted once
however many tries were in flight, any malformed signature header refused without an exception
(here and in docs/notify.md's receiver check), and a job finished while leadership lapsed."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import kopf
import pytest
from pydantic import ValidationError

from recall.base.settings import OperatorSettings
from recall.kube import Invalid
from recall.kube.verbs import BATCHES
from recall.operator.notify.settings import NotifySettings
from recall.operator.notify.sign import sign, verify
from recall.operator.notify.transport import Answer, Outcome
from recall.operator.runtime.handlers import register
from recall.resources.job import Sink
from recall_dev.twin.api import Fault, MemoryApi
from recall_dev.twin.clock import FakeClock
from tests import receiver
from tests.unit.fakes import NS
from tests.unit.operator.test_notify import (
    KEY,
    SINK,
    FakeSender,
    failed_items,
    finished_job,
    known,
    notifier,
    sync,
)

ROOT = Path(__file__).resolve().parents[3]
BATCH_COMPLETED = "dev.recall.batch.completed"


def sinks(name: str, n: int) -> list[dict[str, Any]]:
    return [
        {**SINK, "url": f"https://{name}{i}.example/", "types": [BATCH_COMPLETED]} for i in range(n)
    ]


def batch_event_handler() -> Any:
    """The operator's kopf handler of a Batch's watch events, as registered."""
    registry = kopf.OperatorRegistry()
    register(registry, OperatorSettings(namespace=NS), MemoryApi(), None)  # type: ignore[arg-type]
    [handler] = [h for h in registry._watching.get_all_handlers() if h.id == "batch_event"]
    return handler.fn


def test_deletion__a_deleted_batchs_event_is_given_up_after_delete_seconds() -> None:
    store, clock = MemoryApi(), FakeClock()
    store.put_secret(NS, "s", {"hmac": KEY})
    failed_items(store, clock, "b", 2, notify=[{**SINK, "types": [BATCH_COMPLETED]}])
    sender = FakeSender(Outcome.UNAVAILABLE)  # the sink never comes back
    n = notifier(store, clock, sender, batches=known(store, "b"), delete_seconds=300)
    batch = store.get_batch(NS, "b")
    assert batch is not None
    n.run_once()
    assert n.deletion_pending(batch)
    clock.step(301)
    assert not n.deletion_pending(batch)  # the finalizer's bound: the Batch goes
    raw = store.verbs.get(BATCHES, NS, "b")
    store.delete_batch(NS, "b")
    forgotten: list[Any] = []
    runtime = SimpleNamespace(controller=SimpleNamespace(forget_batch=forgotten.append), notifier=n)
    batch_event_handler()(type="DELETED", body=raw, memo=SimpleNamespace(runtime=runtime))
    assert forgotten == [(NS, "b")]
    for _ in range(40):  # 320 s at the cap (8 s): past delete_seconds
        clock.step(8)
        n.run_once()
    sent = len(sender.sent)
    for _ in range(20):
        clock.step(8)
        n.run_once()
    assert len(sender.sent) == sent  # given up: asked no more
    assert n.outbox.owed == {} and n.pending() == 0  # and not kept


def test_settings__at_most_four_default_sinks_here_and_in_the_chart() -> None:
    four = [Sink.model_validate(s) for s in sinks("d", 4)]
    assert len(NotifySettings(default_sinks=four).default_sinks) == 4
    with pytest.raises(ValidationError):
        NotifySettings(default_sinks=[*four, four[0]])
    schema = json.loads((ROOT / "charts/recall/values.schema.json").read_text())
    assert schema["properties"]["notify"]["properties"]["defaultSinks"]["maxItems"] == 4


def test_record__never_past_eight_sinks_the_current_ones_kept() -> None:
    """A Batch whose sinks changed after four acknowledged its event: its 4 sinks and the 4
    defaults acknowledge it too. The record names those 8 (the CRD's bound, as the API server
    holds it here), not the 4 it had besides: one write settles it."""
    store, clock = MemoryApi(), FakeClock()
    store.put_secret(NS, "s", {"hmac": KEY})
    failed_items(store, clock, "b", 1, notify=sinks("own", 4))
    old = [s["url"] for s in sinks("old", 4)]
    store.patch_batch_status(NS, "b", None, {"notified": {"id": "e", "delivered": old}})

    def past_bound(args: dict[str, Any]) -> bool:
        record = (args.get("patch") or {}).get("notified") or {}
        return len(record.get("delivered") or []) > 8 or len(record.get("givenUp") or []) > 8

    store.inject(
        Fault("patch_batch_status", Invalid("too many", status=422), times=10**6, when=past_bound)
    )
    defaults = sinks("default", 4)
    n = notifier(store, clock, FakeSender(), batches=known(store, "b"), default_sinks=defaults)
    before = len(store.calls)
    for _ in range(5):
        n.run_once()
    batch = store.get_batch(NS, "b")
    assert batch is not None and batch.status.notified is not None
    assert batch.status.notified.time is not None
    current = sorted(s["url"] for s in sinks("own", 4) + defaults)
    assert batch.status.notified.delivered == current
    assert store.calls[before:].count(("patch_batch_status", "b")) == 1


def test_record__refused_is_logged_and_not_written_again_every_pass() -> None:
    store, clock = MemoryApi(), FakeClock()
    store.put_secret(NS, "s", {"hmac": KEY})
    finished_job(store, clock, "j")
    store.inject(Fault("patch_job_status", Invalid("refused", status=422), times=10**6))
    sender = FakeSender()
    n = notifier(store, clock, sender)
    before = len(store.calls)
    for _ in range(10):
        n.run_once()
        clock.step(1)
    assert store.calls[before:].count(("patch_job_status", "j")) == 1
    assert len(sender.sent) == 1  # not loaded and sent again either


class TimedSender(FakeSender):
    """A FakeSender that notes when (the clock's monotonic time) each request went."""

    def __init__(self, clock: FakeClock, *answers: Outcome) -> None:
        super().__init__(*answers)
        self.clock = clock
        self.times: list[float] = []

    def post(self, url: str, headers: dict[str, str], body: bytes) -> Answer:
        self.times.append(self.clock.monotonic())
        return super().post(url, headers, body)


def test_backoff__a_failed_burst_counts_once__the_first_retry_after_a_second() -> None:
    store, clock = MemoryApi(), FakeClock()
    store.put_secret(NS, "s", {"hmac": KEY})
    for i in range(8):
        finished_job(store, clock, f"j{i}")
    sender = TimedSender(clock, *[Outcome.UNAVAILABLE] * 8, Outcome.DELIVERED)
    n = notifier(store, clock, sender)
    start = clock.monotonic()
    for _ in range(12):
        n.run_once()
        clock.step(1)
    times = [t - start for t in sender.times]
    assert times[:9] == [0.0] * 8 + [1.0]  # 8 in flight failed together: one failure
    assert len(times) == 16 and n.pending() == 0


MALFORMED = [
    "t=²,v1=00",
    "t=100,v1=é",
    "t=abc,v1=00",
    "t=١٠٠,v1=00",
    "t=" + "9" * 400,
    "t=1\n,v1=0",
    "",
]


def docs_verify() -> Any:
    """docs/notify.md's receiver check, run as the page shows it."""
    page = (ROOT / "docs/notify.md").read_text()
    section = page[page.index("## Verifying a request") :]
    [code] = re.findall(r"```python\n(.*?)```", section, re.S)[:1]
    scope: dict[str, Any] = {}
    exec(code, scope)  # the page's own snippet, as a reader copies it
    return scope["verify"]


@pytest.mark.parametrize("header", MALFORMED)
def test_verify__a_malformed_header_is_refused_never_raises(header: str) -> None:
    body, now = b'{"id":"x"}', time.time()
    assert verify(header, body, [KEY], now=100) is False
    assert docs_verify()(header, body, [KEY]) is False
    assert receiver.verify(header, body, [KEY], now=now) is False


def test_verify__the_documented_check_accepts_a_signed_request() -> None:
    body, now = b'{"id":"x"}', int(time.time())
    header = sign(body, [b"old", KEY], now)
    assert docs_verify()(header, body, [KEY]) and receiver.verify(header, body, [KEY], now)
    assert not docs_verify()(header, body + b" ", [KEY])


def test_notifier__a_job_finished_while_leadership_lapsed_between_passes_is_sent() -> None:
    store, clock = MemoryApi(), FakeClock()
    store.put_secret(NS, "s", {"hmac": KEY})
    sender = FakeSender()
    n = notifier(store, clock, sender)
    n.run_once()  # a term: nothing owed
    n.leading.clear()  # lost and won again before the next pass
    finished_job(store, clock, "j")
    sync(n, store)
    n.leading.set()
    n.run_once()
    n.run_once()
    assert [body["subject"] for _, body, _ in sender.sent] == ["j"]
