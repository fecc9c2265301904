"""A zombie worker: frozen (SIGSTOP) past its lease, reclaimed, superseded, then resumed.

The freeze is placed by fault injection right after the worker's own lease check and before
its PATCH — the one moment a client-side check cannot help. The resumed zombie's write must
then be rejected by the API server (409 on its stale resourceVersion, then a refusal on
re-read), and nothing it produced may be referenced, nor left in the results store.
"""

from __future__ import annotations

import signal

import pytest

from recall.bucket import Bucket
from recall.kube.client import KubeClient as Kube
from recall.resources import Phase
from tests.helpers import (
    ControllerThread,
    Procs,
    create_job,
    get_job,
    process_state,
    wait_for,
    wait_for_phase,
    wait_for_the_result_alone,
)

LEASE = 3


def events_named(events: list[dict[str, object]], name: str) -> list[dict[str, object]]:
    return [e for e in events if e.get("event") == name]


@pytest.mark.parametrize("frozen_at", ["renew", "complete"])
def test_zombie__write_rejected_after_reclaim_and_new_claim(
    kube: Kube, namespace: str, procs: Procs, results: Bucket, frozen_at: str
) -> None:
    # 2.4 s of work, a checkpoint every second: a renewal comes before the complete.
    create_job(
        kube,
        namespace,
        "z",
        lease=LEASE,
        checkpoint=1,
        simulate={"chunks": 6, "chunkDelaySeconds": 0.4},
    )
    zombie = procs.simulated_worker(
        "a", namespace, env={"RECALL_FAULT": f"worker-pause-before-write:{frozen_at}"}
    )
    wait_for(
        lambda: zombie.alive() and process_state(zombie.popen.pid) == "T",
        timeout=30,
        message=lambda: "worker A to freeze\n" + procs.dump(),
    )
    frozen = get_job(kube, namespace, "z")
    assert frozen.status.phase == Phase.LEASED
    assert frozen.status.lease is not None and frozen.status.lease.holder == "a"

    with ControllerThread(kube, namespace, results) as reaper:
        wait_for(lambda: reaper.reclaimed, timeout=LEASE + 5, message="the reclaim")
        b = procs.simulated_worker("b", namespace, "--max-jobs", "1")
        wait_for_phase(kube, namespace, "z", Phase.SUCCEEDED, timeout=30, procs=procs)
        assert b.wait(timeout=30) == 0

        zombie.signal(signal.SIGCONT)
        refused = wait_for(
            lambda: events_named(zombie.events(), "write_refused"),
            timeout=15,
            message=lambda: "A's write to be refused\n" + procs.dump(),
        )
        # The API server answered A's write with 409; the re-read showed the lease is not
        # A's. (Another of A's threads may have noticed the passed renew deadline first: the
        # lease is then lost for that reason, but the frozen write still reaches the server
        # and is refused.)
        assert refused[0]["action"] == frozen_at
        assert refused[0]["conflicts"] == 1
        assert refused[0]["reason"] in ("Terminal", "TokenMismatch", "NotHolder")
        assert events_named(zombie.events(), "lease_lost")

        final = get_job(kube, namespace, "z")
        assert final.status.phase == Phase.SUCCEEDED
        assert final.status.result is not None
        assert (final.status.result.worker, final.status.result.attempt) == ("b", 2)
        # Nothing of A's is left in the store: only the accepted transcript stays.
        wait_for_the_result_alone(results, namespace, final, attempt=2, timeout=20)
    if frozen_at == "complete":
        assert "complete_refused_transcript_left" in zombie.event_names()
    assert "completed" not in zombie.event_names()
    zombie.signal(signal.SIGTERM)
    assert zombie.wait(timeout=20) == 0
