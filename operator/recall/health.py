"""The worker's health endpoint: is the worker loop still turning?

A worker whose loop froze (a deadlock, a stuck engine call past every timeout) keeps its pod
Running forever; its leases expire and are reclaimed, but the pod takes no new work. The loop
calls `Liveness.beat()` each time it turns (after a claim attempt, after each chunk, while
idle); the kubelet probes `GET /healthz` and restarts the container when the last beat is older
than `max_silence` seconds.

    liveness = Liveness(max_silence=120.0)
    server = serve(liveness, port=8081)     # a daemon thread; server.shutdown() stops it
    ...
    liveness.beat()                          # from the worker loop
    liveness.stopping()                      # on SIGTERM: not ready, still alive

- `GET /healthz` → 200 while the last beat is younger than `max_silence` (counting from
  creation, so start-up has that long to beat once), else 503.
- `GET /readyz` → 200 once the loop has beaten at least once, while alive and not stopping;
  else 503. Anything else → 404.
- Time is the monotonic clock passed in (`clock`, injectable for tests); nothing here reads a
  wall clock. `beat()` is thread-safe and costs one clock read.
- Not provided: TLS, authentication (the port is for the kubelet; a NetworkPolicy can close it
  to everything else), any statement about the leases themselves.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Liveness:
    """The last beat of the worker loop, judged against `max_silence` seconds."""

    def __init__(self, max_silence: float, clock: Callable[[], float] = time.monotonic) -> None:
        if max_silence <= 0:
            raise ValueError("max_silence must be positive")
        self.max_silence = max_silence
        self._clock = clock
        self._lock = threading.Lock()
        self._last = clock()
        self._beaten = False
        self._stopping = False

    def beat(self) -> None:
        """The loop is alive now."""
        now = self._clock()
        with self._lock:
            self._last = now
            self._beaten = True

    def stopping(self) -> None:
        """The worker takes no new job (SIGTERM): not ready any more, still alive."""
        with self._lock:
            self._stopping = True

    def silence(self) -> float:
        """Seconds since the last beat (or since creation, before the first)."""
        with self._lock:
            return self._clock() - self._last

    def alive(self) -> bool:
        return self.silence() < self.max_silence

    def ready(self) -> bool:
        with self._lock:
            beaten, stopping = self._beaten, self._stopping
        return beaten and not stopping and self.alive()


def _handler(liveness: Liveness) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/healthz":
                ok = liveness.alive()
            elif self.path == "/readyz":
                ok = liveness.ready()
            else:
                self._answer(404, b"not found\n")
                return
            silence = f"{liveness.silence():.1f}"
            if ok:
                self._answer(200, f"ok (last beat {silence} s ago)\n".encode())
            else:
                self._answer(503, f"unhealthy (last beat {silence} s ago)\n".encode())

        def _answer(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Probes every few seconds are not worth a log line."""

    return Handler


def serve(liveness: Liveness, port: int, host: str = "0.0.0.0") -> ThreadingHTTPServer:
    """Serve /healthz and /readyz on `host:port` from a daemon thread; returns the server
    (`server.server_address` has the bound port when `port` is 0; `shutdown()` stops it)."""
    server = ThreadingHTTPServer((host, port), _handler(liveness))
    server.daemon_threads = True
    thread = threading.Thread(
        target=server.serve_forever, name="worker-health", kwargs={"poll_interval": 0.5}
    )
    thread.daemon = True
    thread.start()
    return server
