"""One client process of the write-limit benchmark: fenced `/status` writes as fast as it can.

    python -m bench.writer NAMESPACE SECONDS JOB...

It claims each of its jobs (a fenced write), then renews them in turn — each renewal a PATCH of
`/status` carrying the resourceVersion it was decided on and a new fence, exactly what a lease
holder sends — until SECONDS pass. Prints one JSON line: {"writes": n, "conflicts": c,
"seconds": s}. The jobs are its own, so every 409 it meets is the API server's doing.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time

from recall.fencing import fenced_write
from recall.kube.client import KubeClient, load_api_client
from recall.protocol import lease
from recall.protocol.lease import Budget
from recall.resources import TranscriptionJob


def main(namespace: str, seconds: float, names: list[str]) -> None:
    store = KubeClient(load_api_client())
    token = lease.new_token()
    me = f"writer-{names[0]}"
    known: dict[str, TranscriptionJob] = {}
    for name in names:
        result = fenced_write(
            store,
            namespace,
            name,
            lambda j: lease.claim(
                j.status,
                dt.datetime.now(dt.UTC),
                me,
                token,
                lease_seconds=3600,
                budget=Budget(5, 10),
            ),
            action="claim",
        )
        assert result.applied and result.job is not None, result
        known[name] = result.job
    writes = conflicts = seq = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        for name in names:
            seq += 1
            result = fenced_write(
                store,
                namespace,
                name,
                lambda j, s=seq: lease.renew(
                    j.status, dt.datetime.now(dt.UTC), me, token, seq=s + 1
                ),  # type: ignore[misc]
                action="renew",
                known=known[name],
            )
            assert result.applied and result.job is not None
            known[name] = result.job
            writes += 1
            conflicts += result.conflicts
    print(
        json.dumps(
            {"writes": writes, "conflicts": conflicts, "seconds": time.monotonic() - started}
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), sys.argv[3:])
