"""Events out through the whole system: a Batch of simulated jobs, `recall operator` processes
and a receiver on 127.0.0.1 that verifies every signature; the receiver refuses, is slow and is
down, and the operator is killed (SIGKILL) twice while it delivers.

Invariant 13 (DESIGN §5): every finished job's and the Batch's event reaches the sink at least
once, signed, a repeat only with the same id; the Batch's TTL waits for its events.
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator

import pytest
from kubernetes import client

from recall.kube.client import KubeClient as Kube
from recall.operator.notify import events
from recall.resources import BATCH_PLURAL, GROUP, VERSION
from tests.helpers import (
    Procs,
    batch_manifest,
    get_batch,
    job_event_ids,
    list_jobs,
    notify_sink,
    wait_for,
)
from tests.receiver import OPERATOR_ENV, Receiver

pytestmark = pytest.mark.slow
KEY = b"e2e-hmac-key"
ITEMS = [f"k{i:02d}" for i in range(12)]


def kill_after(tries: int) -> dict[str, str]:
    return {**OPERATOR_ENV, "RECALL_FAULT": f"operator-after-notify:{tries}"}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver([KEY], slow=0.5) as r:
        yield r


def test_notify__every_event_delivered_through_a_refusing_slow_and_down_sink_and_two_kills(
    kube: Kube, api: client.ApiClient, namespace: str, procs: Procs, receiver: Receiver
) -> None:
    manifest = batch_manifest("b", ITEMS, simulate={"chunks": 2, "chunkDelaySeconds": 0.2})
    manifest["spec"]["notify"] = [notify_sink(api, namespace, receiver.url, KEY)]
    manifest["spec"]["ttlSecondsAfterFinished"] = 0
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, BATCH_PLURAL, manifest)
    receiver.refuse_first, receiver.mode = 3, "slow"
    # The first operator dies (SIGKILL) right after its 6th request reached the sink, before
    # recording it: three refused, then slow ones accepted.
    op = procs.recall("op1", "operator", "--namespace", namespace, env=kill_after(6))
    for i in range(3):
        procs.simulated_worker(f"w{i}", namespace)
    assert op.wait(120) == -signal.SIGKILL
    statuses = [d.status for d in receiver.all()]
    assert statuses[:3] == [400, 400, 400] and statuses.count(200) >= 3, statuses

    # The sink is down while the second operator starts and publishes the jobs; it comes back
    # slow, and that operator is killed while it delivers.
    receiver.stop()
    op = procs.recall("op2", "operator", "--namespace", namespace, env=OPERATOR_ENV)
    wait_for(lambda: all_final(kube, namespace), timeout=120, message="every job final")
    seen = len(receiver.accepted())
    receiver.start()
    receiver.mode = "slow"
    wait_for(lambda: len(receiver.accepted()) > seen, timeout=60, message="deliveries again")
    op.signal(signal.SIGKILL)
    op.wait(10)
    receiver.mode = "ok"

    # A third operator settles everything.
    expected = job_event_ids(kube, namespace)
    procs.recall("op3", "operator", "--namespace", namespace, env=OPERATOR_ENV)

    def settled() -> bool:
        n = get_batch(kube, namespace, "b").status.notified
        return n is not None and n.time is not None

    wait_for(settled, timeout=120, message="the Batch's events settled")
    batch = get_batch(kube, namespace, "b")
    expected.add(events.event_id(batch.metadata.uid or "", events.BATCH_COMPLETED))
    got = receiver.all()
    assert not [d for d in got if not d.signed], "an unsigned or badly signed request"
    accepted = {d.id for d in receiver.accepted()}
    assert accepted == expected, "every event at least once, and no other id"
    items = batch.status.notified.items if batch.status.notified else None
    assert items is not None and (items.delivered, items.given_up, items.pending) == (12, 0, 0)
    completed = next(d for d in got if d.type == events.BATCH_COMPLETED)
    assert completed.data["counts"]["total"] == len(ITEMS)
    # The TTL (0 s) deleted the jobs only once their events were settled.
    wait_for(lambda: not list_jobs(kube, namespace), timeout=30, message="the TTL")
    tries = Counter(d.id for d in got)
    print(
        f"\nnotify e2e: {len(expected)} events, {len(got)} requests "
        f"({len(receiver.accepted())} accepted), at most {max(tries.values())} of one id, "
        f"{sum(1 for n in tries.values() if n > 1)} ids sent more than once, 0 unsigned"
    )


def all_final(kube: Kube, namespace: str) -> bool:
    jobs = list_jobs(kube, namespace)
    return len(jobs) == len(ITEMS) and all(
        j.status.effective_phase.terminal and (j.status.phase != "Succeeded" or j.status.published)
        for j in jobs
    )
