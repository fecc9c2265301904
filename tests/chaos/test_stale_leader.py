"""A leader frozen past its Lease must not write when it wakes up: found by the chaos run.

The chaos run froze the leading operator (SIGSTOP) for 10.8 s, in the middle of a tick; the
other replica took over and projected two finished jobs as completed. When the frozen one was
continued, it finished its tick: it projected its stale cache onto the Batch (its write, guarded
by the Batch's resourceVersion only, met a 409, read the Batch again and projected the same
stale jobs onto it), moving both items from completed back to transcribing. The new leader had
no change to project, so the Batch lied until its next full reconcile (30 s).

Here the leader freezes itself right before a projection, which makes the same interleaving
certain, at two points: before its leadership check (the woken replica finds its renew
deadline passed and writes nothing), and after it (the write goes out, and the API server
refuses it for its older `operatorTerm`).
"""

from __future__ import annotations

import signal
import time

import pytest

from recall.bucket import Bucket
from recall.kube.client import KubeClient as Kube
from recall.resources import ItemPhase, Result
from recall.transcripts import Transcript, directory_of, transcript_key
from recall.worker.holder import LeaseHolder
from tests.helpers import Procs, create_batch, get_job, item_phase, process_state, wait_for

LEADER = {
    "RECALL_OPERATOR_LEASE_DURATION": "3",
    "RECALL_OPERATOR_RENEW_DEADLINE": "2",
    "RECALL_OPERATOR_RETRY_PERIOD": "0.5",
}


def leader(kube: Kube, namespace: str) -> str | None:
    lease = kube.get_lease(namespace, "recall-operator")
    holder: str | None = ((lease or {}).get("spec") or {}).get("holderIdentity")
    return holder


@pytest.mark.slow
@pytest.mark.parametrize(
    "point", ["operator-pause-before-projection", "operator-pause-before-status-write"]
)
def test_frozen_leader__does_not_move_items_back_when_continued(
    kube: Kube, namespace: str, procs: Procs, results: Bucket, point: str
) -> None:
    args = ("operator", "--namespace", namespace, "--leader-election")
    first = procs.recall(
        "op-a",
        *args,
        env={
            **LEADER,
            "RECALL_OPERATOR_IDENTITY": "op-a",
            "RECALL_FAULT": f"{point}:b",
        },
    )
    wait_for(lambda: leader(kube, namespace) == "op-a", timeout=30, message=procs.dump)
    procs.recall("op-b", *args, env={**LEADER, "RECALL_OPERATOR_IDENTITY": "op-b"})
    create_batch(kube, namespace, "b", ["a"], lease=5, simulate={"chunks": 1})
    # op-a creates the job, then freezes right before writing the Batch status.
    wait_for(lambda: process_state(first.popen.pid) == "T", timeout=30, message=procs.dump)
    wait_for(lambda: leader(kube, namespace) == "op-b", timeout=30, message=procs.dump)

    holder = LeaseHolder.claim(
        kube, get_job(kube, namespace, "b-a"), "w", renew_deadline_fraction=0.9
    )
    assert isinstance(holder, LeaseHolder)
    key = transcript_key(directory_of(holder.known, holder.attempt, holder.token))
    results.put(key, Transcript(segments=[], duration=30.0, engine="test").encode())
    holder.complete(Result(transcript=key))
    wait_for(
        lambda: item_phase(kube, namespace, "b", "a") == ItemPhase.COMPLETED,
        timeout=10,
        message=procs.dump,
    )

    first.signal(signal.SIGCONT)
    seen = []
    for _ in range(30):
        seen.append(item_phase(kube, namespace, "b", "a"))
        time.sleep(0.1)
    assert set(seen) == {ItemPhase.COMPLETED}, (
        f"the finished item was shown as {sorted(set(map(str, seen)))} after the ex-leader "
        f"was continued\n{procs.dump()}"
    )
    why = "not leading" if point == "operator-pause-before-projection" else "operatorTerm"
    wait_for(lambda: why in first.log.read_text(), timeout=10, message=procs.dump)
