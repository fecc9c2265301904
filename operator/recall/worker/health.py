"""The worker's health endpoint: `/healthz` answers 200 while the work loop turns.

A worker whose loop froze (a deadlock, a stuck engine call) would keep its pod Running without
taking work. `Liveness.beat()` is called by each slot's loop at each turn, and by the work at each
step it makes (an engine call answered, a chunk stored, a chunk labelled with speakers:
`recall.worker.attempt`), so a worker busy with a job longer than `stale_after` stays alive, while
one whose engine call or store write hangs goes stale. A beat is the worker's: with several slots
it says some slot moved on (or turned idle), not every one. The kubelet probes:

- `GET /healthz` (or `/livez`) → 200 while the last beat is younger than `stale_after` seconds
  (counting from creation, so start-up has that long to beat once), else 503. A frozen process
  answers nothing at all, which the probe's timeout catches.
- `GET /readyz` → 200 once the loop has beaten, while alive, not `draining()`
  (`recall.worker.drain`) and not `stopping()` (SIGTERM), else 503. Anything else → 404.

Time is the injected monotonic `clock`; no wall clock is read. Served from a daemon thread on
all interfaces; port 0 = off. Not provided: TLS or authentication (the port is for the kubelet;
the chart's NetworkPolicy closes it to others).
"""

from __future__ import annotations

from collections.abc import Callable
from http.server import ThreadingHTTPServer

from recall.base import endpoint
from recall.base.clock import SYSTEM, Clock


class Liveness:
    def __init__(self, stale_after: float = 120.0, clock: Clock = SYSTEM) -> None:
        if stale_after <= 0:
            raise ValueError("stale_after must be positive")
        self.stale_after = stale_after
        self._clock = clock
        self._last = clock.monotonic()
        self._beaten = False
        self._stopping = False
        self.draining: Callable[[], bool] = lambda: False  # the worker's drain (set by its owner)
        self.server: ThreadingHTTPServer | None = None

    def beat(self) -> None:
        """The loop is alive now."""
        self._last = self._clock.monotonic()
        self._beaten = True

    def stopping(self) -> None:
        """The worker takes no new job (SIGTERM): not ready any more, still alive."""
        self._stopping = True

    def age(self) -> float:
        """Seconds since the last beat (or since creation, before the first)."""
        return self._clock.monotonic() - self._last

    def healthy(self) -> bool:
        return self.age() < self.stale_after

    def ready(self) -> bool:
        return self._beaten and not self._stopping and not self.draining() and self.healthy()

    def serve(self, port: int, addr: str | None = None) -> None:
        """Serve /healthz, /livez and /readyz on `port` (every address, both families where the
        host has IPv6: `endpoint.any_address`) from a daemon thread. Port 0 disables it
        (`self.server.server_address` has the bound port otherwise)."""
        self.server = endpoint.serve(self._route, port, "healthz", addr)

    def _route(self, target: str) -> tuple[int, str, bytes] | None:
        routes = {"/healthz": self.healthy, "/livez": self.healthy, "/readyz": self.ready}
        check = routes.get(target.split("?")[0])
        if check is None:
            return None
        ok = check()
        body = f"{'ok' if ok else 'stale'} {self.age():.1f}s\n".encode()
        return 200 if ok else 503, "text/plain", body
