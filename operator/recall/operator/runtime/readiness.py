"""The operator's readiness: `GET /readyz` on `RECALL_OPERATOR_HEALTH_PORT`.

200 once the job cache is synced and the results store answered its last call (a standby
probes it every 30 s, and every replica probes it again with backoff while it does not answer:
`results.Probes`); 503 otherwise, with the reason in the body: a store the operator cannot
reach (a wrong endpoint, refused credentials, a missing bucket) shows here, in the pod's
readiness, instead of only in the logs. Liveness stays kopf's (`/healthz` on the liveness
port): a store outage must not restart the operator, only say it. Port 0 = off. Served from a
daemon thread; not provided: TLS or authentication (the port is for the kubelet).
"""

from __future__ import annotations

from collections.abc import Callable
from http.server import ThreadingHTTPServer

from recall.base import endpoint


def serve(port: int, ready: Callable[[], str | None]) -> ThreadingHTTPServer | None:
    """Serve /readyz from a daemon thread; `ready()` returns why not, or None when ready."""

    def route(target: str) -> tuple[int, str, bytes] | None:
        if target.split("?")[0] != "/readyz":
            return None
        why = ready()
        body = ("ok\n" if why is None else f"not ready: {why}\n").encode()
        return 200 if why is None else 503, "text/plain; charset=utf-8", body

    return endpoint.serve(route, port, "readiness")
