"""Events out under faults (`make chaos`; `make test` runs the short profile): a Batch and single
jobs (some failing) with a sink, while the receiver goes down and comes back, turns slow or
refuses, and the operator is killed, now at a random moment, now right after a request reached
the sink and before its record (the `operator-after-notify` fault point), and started again.

Invariant 13 (DESIGN §5), checked at the end: every finished job's event and the Batch's
reached the sink at least once, signed, and every repeat carries an id of an expected event.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from kubernetes import client

from recall.kube.client import KubeClient as Kube
from recall.operator.notify import events
from recall.resources import BATCH_PLURAL, GROUP, VERSION
from tests.helpers import (
    Proc,
    Procs,
    batch_manifest,
    get_batch,
    job_event_ids,
    job_manifest,
    list_jobs,
    notify_sink,
    wait_for,
)
from tests.receiver import OPERATOR_ENV, Receiver

pytestmark = pytest.mark.slow
PROFILE = os.environ.get("RECALL_CHAOS_PROFILE", "short")
SEED = int((os.environ.get("RECALL_CHAOS_SEEDS") or "1").split(",")[0])
SECONDS = {"short": 25.0, "long": 90.0}[PROFILE]
KEY = b"chaos-hmac-key"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver([KEY], slow=0.4) as r:
        yield r


def test_chaos__every_finished_jobs_event_delivered(
    kube: Kube, api: client.ApiClient, namespace: str, procs: Procs, receiver: Receiver
) -> None:
    rng = random.Random(SEED)
    sink = notify_sink(api, namespace, receiver.url, KEY)
    items = [f"i{n:02d}" for n in range(24 if PROFILE == "short" else 60)]
    batch = batch_manifest("b", items, simulate={"chunks": 3, "chunkDelaySeconds": 0.5})
    batch["spec"]["notify"] = [sink]
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, BATCH_PLURAL, batch)
    for n in range(8):
        failing = {"failure": "permanent"} if n % 4 == 3 else {}
        manifest = job_manifest(
            f"s{n}", simulate={"chunks": 3, "chunkDelaySeconds": 0.5, **failing}
        )
        manifest["spec"]["notify"] = [sink]
        kube.create_job(namespace, manifest)
    for i in range(2):
        procs.simulated_worker(f"w{i}", namespace)

    kills = 0
    operator, started = start(procs, namespace, rng, 0), time.monotonic()
    deadline = time.monotonic() + SECONDS
    # Faults go on for SECONDS at least, and until every job is final and some time after, so
    # that they meet the deliveries (which start as the jobs finish).
    finished_at: float | None = None
    while time.monotonic() < deadline or finished_at is None or time.monotonic() < finished_at:
        if finished_at is None and all_final(kube, namespace, len(items) + 8):
            finished_at = time.monotonic() + 8.0
        time.sleep(rng.uniform(1.0, 3.0))
        fault = rng.choice(["down", "slow", "refuse", "kill", "kill"])
        if fault == "down":
            receiver.stop()
            time.sleep(rng.uniform(0.5, 3.0))
            receiver.start()
        elif fault in ("slow", "refuse"):
            receiver.mode = fault
            time.sleep(rng.uniform(0.5, 2.0))
            receiver.mode = "ok"
        elif operator.popen.poll() is None and time.monotonic() - started > rng.uniform(6, 12):
            operator.signal(signal.SIGKILL)  # after it has had time to start and deliver
            operator.wait(10)
        if operator.popen.poll() is not None:  # killed here, or at its fault point
            kills += 1
            operator, started = start(procs, namespace, rng, kills), time.monotonic()
    receiver.mode = "ok"
    if operator.popen.poll() is not None:
        operator = start(procs, namespace, rng, kills + 1, fault=False)

    def settled() -> bool:
        if operator.popen.poll() is not None:
            return False
        b = get_batch(kube, namespace, "b").status.notified
        jobs = list_jobs(kube, namespace)
        singles = [j for j in jobs if not j.spec.batch_ref]
        return (
            b is not None
            and b.time is not None
            and len(singles) == 8
            and all(j.status.notified is not None and j.status.notified.time for j in singles)
        )

    wait_for(settled, timeout=240, message="every event settled")
    expected = job_event_ids(kube, namespace)
    b = get_batch(kube, namespace, "b")
    expected.add(events.event_id(b.metadata.uid or "", events.BATCH_COMPLETED))
    got = receiver.all()
    unsigned = [d for d in got if not d.signed]
    accepted = {d.id for d in receiver.accepted()}
    missing = expected - accepted
    unknown = {d.id for d in got} - expected
    tries = Counter(d.id for d in got)
    print(
        f"\nnotify chaos ({PROFILE}, seed {SEED}): {len(expected)} events, {len(got)} requests, "
        f"{kills} operator kills, {sum(1 for n in tries.values() if n > 1)} ids sent more than "
        f"once, {len(missing)} missing, {len(unknown)} unknown ids, {len(unsigned)} unsigned, "
        f"{receiver.broken} cut off mid-send"
    )
    assert not unsigned and not missing and not unknown


def all_final(kube: Kube, namespace: str, total: int) -> bool:
    jobs = list_jobs(kube, namespace)
    return len(jobs) >= total and all(j.status.effective_phase.terminal for j in jobs)


def start(procs: Procs, namespace: str, rng: random.Random, n: int, fault: bool = True) -> Proc:
    """An operator; half of them die right after their k-th request reached the sink."""
    env = dict(OPERATOR_ENV)
    if fault and rng.random() < 0.5:
        env["RECALL_FAULT"] = f"operator-after-notify:{rng.randint(2, 12)}"
    return procs.recall(f"op{n}", "operator", "--namespace", namespace, env=env)
