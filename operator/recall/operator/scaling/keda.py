"""The outstanding work of a worker pool over HTTP, as JSON: what KEDA's `metrics-api` trigger
reads (`worker.autoscaling.mode: keda` in the chart).

    GET /workload?namespace=recall&engine=whisper&pool=gpu
    200 {"namespace": "recall", "engine": "whisper", "pool": "gpu", "queued": 12, "leased": 4,
         "outstanding": 16}
    503 {"error": "..."}      while the operator's view of the jobs is not current

`outstanding` is the quantity the built-in autoscaler scales on (`scaling.workload`):
claimable Queued jobs plus Leased ones, one slot each (the trigger's `targetValue` is the
pool's slots per worker, `valueLocation: outstanding`). The query's namespace and engine
default to the operator's `autoscale_namespace` and `autoscale_engine`, the pool to
`default`.

A view that is not current answers 503, never a guess: KEDA counts the failure, and after
`fallback.failureThreshold` of them applies its fallback (`currentReplicasIfHigher` in the
chart), so a failing metric never shrinks a busy fleet. Every replica serves it (standbys keep
their job view current). Served from a daemon thread; port 0 = off. Not provided: TLS or
authentication (the chart's NetworkPolicy limits who may reach it).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

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


def make_server(
    workload: Workload,
    stale: Callable[[], str | None],
    *,
    namespace: str,
    engine: str,
    port: int,
    addr: str = "0.0.0.0",
) -> ThreadingHTTPServer:
    """The server (not started): `server_address` has the bound port (`port` 0 picks one)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlsplit(self.path)
            if url.path != PATH:
                self._send(404, {"error": f"not found: {url.path}; try {PATH}"})
                return
            query = parse_qs(url.query)
            why = stale()
            if why is not None:
                self._send(503, {"error": f"the operator's view is not current: {why}"})
                return
            ns = (query.get("namespace") or [namespace])[0]
            eng = (query.get("engine") or [engine])[0]
            pool = (query.get("pool") or [DEFAULT_POOL])[0]
            self._send(200, body(workload, ns, eng, pool))

        def _send(self, code: int, payload: dict[str, object]) -> None:
            data = (json.dumps(payload) + "\n").encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            del format, args  # polled every few seconds: no access log

    server = ThreadingHTTPServer((addr, port), Handler)
    server.daemon_threads = True
    return server


def serve(
    workload: Workload,
    stale: Callable[[], str | None],
    *,
    namespace: str,
    engine: str,
    port: int,
) -> ThreadingHTTPServer | None:
    """Serve the endpoint on `port` from a daemon thread (port 0: off, returns None)."""
    if not port:
        return None
    server = make_server(workload, stale, namespace=namespace, engine=engine, port=port)
    threading.Thread(target=server.serve_forever, name="workload-api", daemon=True).start()
    return server
