"""The worker's liveness endpoint: `/healthz` answers 200 while the work loop turns.

`Liveness.beat()` is called on every turn of the loop (and between chunks). `/healthz` answers
200 while the last beat is younger than `stale_after` seconds, 503 otherwise, so a worker whose
loop is stuck gets restarted by the kubelet. A frozen process answers nothing at all, which the
probe's timeout catches. Served from a daemon thread on all interfaces; port 0 = off.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Liveness:
    def __init__(self, stale_after: float = 120.0) -> None:
        self.stale_after = stale_after
        self._last = time.monotonic()
        self.server: ThreadingHTTPServer | None = None

    def beat(self) -> None:
        self._last = time.monotonic()

    def age(self) -> float:
        return time.monotonic() - self._last

    def healthy(self) -> bool:
        return self.age() < self.stale_after

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        """Serve /healthz on `port` from a daemon thread. Port 0 disables it."""
        if not port:
            return
        liveness = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] not in ("/healthz", "/livez"):
                    self.send_error(404)
                    return
                ok = liveness.healthy()
                body = f"{'ok' if ok else 'stale'} {liveness.age():.1f}s\n".encode()
                self.send_response(200 if ok else 503)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                del format, args  # the probe runs every few seconds: no access log

        self.server = ThreadingHTTPServer((addr, port), Handler)
        threading.Thread(target=self.server.serve_forever, name="healthz", daemon=True).start()
