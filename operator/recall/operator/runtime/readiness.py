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

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def serve(port: int, ready: Callable[[], str | None]) -> ThreadingHTTPServer | None:
    """Serve /readyz from a daemon thread; `ready()` returns why not, or None when ready."""
    if not port:
        return None

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/readyz":
                self.send_error(404)
                return
            why = ready()
            body = ("ok\n" if why is None else f"not ready: {why}\n").encode()
            self.send_response(200 if why is None else 503)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return  # the kubelet probes every few seconds: no access log

    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    threading.Thread(target=server.serve_forever, name="readiness", daemon=True).start()
    return server
