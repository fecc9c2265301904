"""A worker pool's outstanding work over HTTP, as JSON: what KEDA's `metrics-api` trigger reads
(`worker.autoscaling.mode: keda` in the chart).

    GET /workload?namespace=recall&engine=whisper&pool=gpu
    200 {"namespace": "recall", "engine": "whisper", "pool": "gpu", "queued": 12, "leased": 4,
         "outstanding": 16}
    503 {"error": "..."}      while the operator's view of the jobs is not current

`outstanding` is what the built-in autoscaler scales on (`scaling.workload`), one slot a job;
the trigger's `targetValue` is the pool's slots per worker (`valueLocation: outstanding`). The
query defaults to the operator's `autoscale_namespace` and `autoscale_engine` and pool `default`.

A view that is not current answers 503, never a guess: KEDA counts the failure and after
`fallback.failureThreshold` applies its fallback (`currentReplicasIfHigher` in the chart), so a
failing metric never shrinks a busy fleet. Every replica serves it (standbys keep their job view
current), from a daemon thread; port 0 = off. Not provided: TLS or authentication (the chart's
NetworkPolicy limits who may reach it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

from recall.base.endpoint import Route
from recall.operator.scaling.workload import Workload
from recall.resources import DEFAULT_POOL

PATH = "/workload"


def body(
    workload: Workload, namespace: str, engine: str, pool: str = DEFAULT_POOL
) -> dict[str, object]:
    work = workload.of(namespace, engine, pool)
    return {
        "namespace": namespace,
        "engine": engine,
        "pool": pool,
        "queued": work.queued,
        "leased": work.leased,
        "outstanding": work.total,
    }


def route(
    workload: Workload, stale: Callable[[], str | None], *, namespace: str, engine: str
) -> Route:
    """The endpoint's answers (`recall.base.endpoint`)."""

    def answer(target: str) -> tuple[int, str, bytes]:
        url = urlsplit(target)
        if url.path != PATH:
            return _json(404, {"error": f"not found: {url.path}; try {PATH}"})
        query = parse_qs(url.query)
        why = stale()
        if why is not None:
            return _json(503, {"error": f"the operator's view is not current: {why}"})
        ns = (query.get("namespace") or [namespace])[0]
        eng = (query.get("engine") or [engine])[0]
        pool = (query.get("pool") or [DEFAULT_POOL])[0]
        return _json(200, body(workload, ns, eng, pool))

    return answer


def _json(code: int, payload: dict[str, object]) -> tuple[int, str, bytes]:
    return code, "application/json", (json.dumps(payload) + "\n").encode()
