"""The operator's readiness: `GET /readyz` on `RECALL_OPERATOR_HEALTH_PORT`.

200 once the job cache is synced and the results store answered its last call (probed as
`results.publish` says); 503 otherwise, with the reason in the body, so an unreachable store (a
wrong endpoint, refused credentials, a missing bucket) shows in the pod's readiness, not only
in the logs. Liveness stays kopf's (`/healthz` on the liveness port): a store outage must not
restart the operator. Port 0 = off. Served from a daemon thread; no TLS or authentication (the
port is for the kubelet).
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
