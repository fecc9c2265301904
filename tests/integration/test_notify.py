"""Events out on the real API server: signed CloudEvents to a receiver on 127.0.0.1 that verifies
them, through refusals, a slow receiver, a receiver down for "an hour" (a short backoff cap on
the injected clock) and an operator killed twice mid-delivery.

Every expected event is received at least once, duplicates carry the same id, nothing arrives
unsigned, and each job's record costs at most two status writes.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client

from recall.fencing import fenced_write
from recall.kube.client import KubeClient
from recall.kube.informer import Informer, Selection
from recall.operator.notify import events
from recall.operator.notify.notifier import Notifier
from recall.operator.notify.send import Sender
from recall.operator.notify.settings import NotifySettings
from recall.operator.notify.sign import HEADER, sign
from recall.operator.notify.transport import Answer
from recall.operator.reconcile.cache import JobCache
from recall.protocol import lease
from recall.resources import Published, Result, is_true
from recall.transcripts import directory_of, transcript_key
from recall.worker.holder import LeaseHolder
from recall_dev.twin.clock import FakeClock
from tests.helpers import events as k8s_events
from tests.helpers import get_job, job_manifest, secret, wait_for
from tests.receiver import Receiver

pytestmark = pytest.mark.integration
KEY = b"s3cret-key"
CAP = 4.0  # the backoff cap "an hour" is made of


class Killed(BaseException):
    """The operator dies here (nothing after this point of its pass runs)."""


class KillAfterPost(Sender):
    """A sender whose process dies right after its `n`-th request reached the receiver."""

    def __init__(self, n: int, **kw: Any) -> None:
        super().__init__(**kw)
        self.n = n

    def post(self, url: str, headers: dict[str, str], body: bytes) -> Answer:
        answer = super().post(url, headers, body)
        self.n -= 1
        if self.n == 0:
            raise Killed
        return answer


class CountingStore(KubeClient):
    """The real store, counting status writes per job."""

    writes: Counter[str]

    def patch_job_status(self, namespace: str, name: str, *args: Any, **kw: Any) -> Any:
        self.writes[name] += 1
        return super().patch_job_status(namespace, name, *args, **kw)


@dataclass
class Operator:
    """One operator's notify side: its own cache, informer and notifier (a restart is a new one)."""

    notifier: Notifier
    stop: threading.Event

    def kill(self) -> None:
        self.stop.set()


def start(store: KubeClient, namespace: str, clock: FakeClock, sender: Sender) -> Operator:
    cache = JobCache(clock)
    stop = threading.Event()
    informer = Informer(Selection.jobs(store, namespace), cache, name="test-informer")
    threading.Thread(target=informer.run, args=(stop,), daemon=True).start()
    leading = threading.Event()
    leading.set()
    settings = NotifySettings(
        allow=["127.0.0.1"], backoff_initial=0.5, backoff_cap=CAP, max_refusals=3, timeout=2
    )
    notifier = Notifier(
        store, cache, leading=leading, batches=dict, settings=settings, clock=clock, sender=sender
    )
    wait_for(cache.synced.is_set, timeout=10, message="the job cache to sync")
    return Operator(notifier, stop)


def notifying_job(store: KubeClient, namespace: str, name: str, url: str, ref: str) -> None:
    manifest = job_manifest(name)
    manifest["spec"]["notify"] = [{"url": url, "secretRef": {"name": ref, "key": "hmac"}}]
    store.create_job(namespace, manifest)


def finish(store: KubeClient, namespace: str, name: str, *, fail: bool = False) -> None:
    """Claim the job and complete (and publish) or fail it, as a worker and the operator do."""
    job = get_job(store, namespace, name)
    holder = LeaseHolder.claim(store, job, "w", renew_deadline_fraction=0.6)
    assert isinstance(holder, LeaseHolder)
    if fail:
        holder.fail("SourceNotFound", "no such file", permanent=True, backoff_base=1, backoff_cap=1)
        return
    key = transcript_key(directory_of(holder.known, holder.attempt, holder.token))
    holder.complete(Result(transcript=key, worker="w", words=3))
    done = Published(time=holder.known.status.completed_at or job.metadata.creation_timestamp)
    fenced_write(
        store,
        namespace,
        name,
        lambda j: lease.publish(j.status, done.time, published=done),
        action="publish",
    )


@pytest.fixture
def store(api: client.ApiClient) -> CountingStore:
    s = CountingStore(api)
    s.writes = Counter()
    return s


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    clock = FakeClock(wall=FakeClock().now())
    r = Receiver([KEY], now=lambda: clock.now().timestamp())
    r.clock = clock  # type: ignore[attr-defined]
    with r:
        yield r


def run_until(
    op: Operator, done: Any, clock: FakeClock, step: float = 0.0, passes: int = 200
) -> int:
    """Passes of `op` (the clock moved `step` between them) until `done()`; how many."""
    for n in range(1, 201):
        op.notifier.run_once()
        if done():
            return n
        clock.step(step)
    raise AssertionError("not done after the passes")


def test_notify__every_event_at_least_once_through_outages_and_two_kills(
    api: client.ApiClient, store: CountingStore, namespace: str, receiver: Receiver
) -> None:
    clock: FakeClock = receiver.clock  # type: ignore[attr-defined]
    secret(api, namespace, "sink", {"hmac": KEY.decode()})
    names = [f"j{i}" for i in range(6)]
    for i, name in enumerate(names):
        notifying_job(store, namespace, name, receiver.url, "sink")
        finish(store, namespace, name, fail=i % 3 == 2)
    before = Counter(store.writes)
    expected = {}
    for name in names:
        job = get_job(store, namespace, name)
        type_ = events.job_type(job)
        assert type_ is not None
        expected[name] = events.event_id(job.metadata.uid or "", type_)

    # 1. The sink is down for "an hour": many backoff caps on the injected clock.
    receiver.stop()
    op = start(store, namespace, clock, Sender(allow=["127.0.0.1"], timeout=2))
    tries = []
    for _ in range(12):
        op.notifier.run_once()
        tries.append(
            sum(1 for o in op.notifier.outbox.owed.values() for t in o.tries.values() if t.attempts)
        )
        clock.step(CAP * 1.6)  # past the cap and its jitter
    gates = list(op.notifier.outbox._gates.values())
    assert gates and gates[0].failures >= 10, "retries went on past the cap"
    assert max(op.notifier.outbox.backoff.delay(g.failures) for g in gates) <= CAP * 1.5
    # A first burst (at most in_flight), then one probe at a time while the sink fails: only
    # the events that were tried have a record (their first failure).
    retrying = [n for n in names if get_job(store, namespace, n).status.notified is not None]
    assert 1 <= len(retrying) <= op.notifier.settings.in_flight
    op.kill()

    # 2. The sink is back but refuses, then is slow; the operator dies right after a request
    #    reached the receiver (its record never written), twice.
    receiver.start()
    receiver.mode = "refuse"
    op = start(store, namespace, clock, KillAfterPost(2, allow=["127.0.0.1"], timeout=2))
    with pytest.raises(Killed):
        run_until(op, lambda: False, clock, step=CAP)
    op.kill()
    receiver.mode = "slow"
    op = start(store, namespace, clock, KillAfterPost(3, allow=["127.0.0.1"], timeout=2))
    with pytest.raises(Killed):
        run_until(op, lambda: False, clock, step=CAP)
    op.kill()

    # 3. A third operator delivers everything that is owed.
    receiver.mode = "ok"
    op = start(store, namespace, clock, Sender(allow=["127.0.0.1"], timeout=2))

    def settled() -> bool:
        return all(
            (n := get_job(store, namespace, name).status.notified) is not None and n.time
            for name in names
        )

    run_until(op, settled, clock, step=CAP)
    op.kill()

    got = receiver.all()
    assert not [d for d in got if not d.signed], "an unsigned or badly signed request"
    assert all(d.content_type == events.CONTENT_TYPE for d in got)
    accepted = {d.id for d in receiver.accepted()}
    assert accepted == set(expected.values()), "every expected event, no other id"
    for name in names:
        job = get_job(store, namespace, name)
        record = job.status.notified
        assert record is not None and record.id == expected[name]
        assert record.delivered == [receiver.url] and not record.given_up
        assert is_true(job.status.conditions, "Notified")
        assert store.writes[name] - before[name] <= 2
    duplicates = Counter(d.id for d in got)
    print(
        f"\nnotify: {len(got)} requests for {len(names)} events, "
        f"{sum(1 for d in got if d.status == 200)} accepted, max {max(duplicates.values())} "
        f"tries of one id, 0 unsigned"
    )


def test_notify__refused_events_given_up_with_a_warning_and_a_missing_key_waits(
    api: client.ApiClient, store: CountingStore, namespace: str, receiver: Receiver
) -> None:
    clock: FakeClock = receiver.clock  # type: ignore[attr-defined]
    notifying_job(store, namespace, "refused", receiver.url, "sink")
    notifying_job(store, namespace, "keyless", receiver.url, "missing")
    finish(store, namespace, "refused")
    finish(store, namespace, "keyless")
    secret(api, namespace, "sink", {"hmac": KEY.decode()})
    receiver.mode = "refuse"
    before = dict(store.writes)
    op = start(store, namespace, clock, Sender(allow=["127.0.0.1"], timeout=2))

    def given_up() -> bool:
        n = get_job(store, namespace, "refused").status.notified
        return n is not None and n.time is not None

    run_until(op, given_up, clock, step=CAP)
    job = get_job(store, namespace, "refused")
    assert job.status.notified is not None and job.status.notified.given_up == [receiver.url]
    assert not is_true(job.status.conditions, "Notified")
    assert store.writes["refused"] - before["refused"] == 2  # first failure, settled
    assert len([d for d in receiver.all() if d.status == 400]) == 3  # max_refusals
    wait_for(lambda: k8s_events(store, namespace, "NotifyGivenUp"), timeout=10)

    # The key is missing: nothing is sent, a Warning Event and a condition say why.
    keyless = get_job(store, namespace, "keyless")
    assert keyless.status.notified is not None and keyless.status.notified.time is None
    cond = [c for c in keyless.status.conditions if c.type == "Notified"]
    assert cond and cond[0].reason == "KeyMissing"
    wait_for(lambda: k8s_events(store, namespace, "NotifyKeyMissing"), timeout=10)
    secret(api, namespace, "missing", {"hmac": KEY.decode()})
    receiver.mode = "ok"

    def delivered() -> bool:
        n = get_job(store, namespace, "keyless").status.notified
        return n is not None and n.time is not None

    run_until(op, delivered, clock, step=op.notifier.settings.secret_seconds)
    assert all(d.signed for d in receiver.all())
    op.kill()


def test_notify__redirects_and_refused_addresses_are_not_followed(
    store: CountingStore, receiver: Receiver
) -> None:
    clock: FakeClock = receiver.clock  # type: ignore[attr-defined]
    receiver.mode = "redirect"
    signed = {HEADER: sign(b"{}", [KEY], int(clock.now().timestamp()))}
    answer = Sender(allow=["127.0.0.1"]).post(receiver.url, signed, b"{}")
    assert answer.outcome == "refused" and answer.status == 307
    # Without the allow-list, loopback is refused before any connection.
    n = len(receiver.all())
    answer = Sender().post(receiver.url, {}, b"{}")
    assert answer.outcome == "refused" and "loopback" in (answer.error or "")
    assert len(receiver.all()) == n
    # A name that resolves to loopback is refused the same way (the resolved address counts).
    answer = Sender().post(f"http://localhost:{receiver.port}/events", {}, b"{}")
    assert answer.outcome == "refused"
