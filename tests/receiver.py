"""A CloudEvents sink on 127.0.0.1 that verifies every request's signature, for the tests.

    receiver = Receiver([b"key"])
    url = receiver.start()          # up; .stop() takes it down (connections refused), .start()
    receiver.mode = "refuse"        # ok | refuse (400) | unavailable (503) | slow | redirect
    receiver.received               # every request: its event id and type, signed or not
    receiver.broken                 # requests whose body ended early (a sender killed mid-send)

The check is the one docs/notify.md gives receivers, written here from the document (not
imported from the operator), so a test of the operator is also a test of the document.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOLERANCE = 300
# The operator's notify settings for tests: quick retries to a short cap, a refusing phase
# never giving an event up, the sink on loopback allowed.
OPERATOR_ENV = {
    "RECALL_NOTIFY_ALLOW": json.dumps(["127.0.0.1"]),
    "RECALL_NOTIFY_BACKOFF_INITIAL": "0.2",
    "RECALL_NOTIFY_BACKOFF_CAP": "1.0",
    "RECALL_NOTIFY_MAX_REFUSALS": "1000",
    "RECALL_NOTIFY_TIMEOUT": "2",
}


def verify(header: str, body: bytes, keys: list[bytes], now: float) -> bool:
    """docs/notify.md's receiver check: a fresh `t` and one `v1` that matches a key."""
    parts = [p.split("=", 1) for p in header.split(",") if "=" in p]
    stamps = [v for k, v in parts if k == "t"]
    if len(stamps) != 1 or not re.fullmatch(r"[0-9]{1,15}", stamps[0]):
        return False  # no Unix time, or a malformed one
    if abs(now - int(stamps[0])) > TOLERANCE:
        return False
    signed = stamps[0].encode() + b"." + body
    expected = [hmac.new(k, signed, hashlib.sha256).hexdigest().encode() for k in keys]
    given = [v.encode() for k, v in parts if k == "v1" and v.isascii()]
    return any(hmac.compare_digest(v, e) for v in given for e in expected)


@dataclass(frozen=True)
class Delivery:
    id: str | None
    type: str | None
    signed: bool  # the signature verified
    content_type: str
    data: dict[str, Any]
    status: int  # what the receiver answered


class Receiver:
    def __init__(
        self, keys: list[bytes], now: Callable[[], float] = time.time, slow: float = 0.3
    ) -> None:
        self.keys = keys
        self.now = now
        self.slow = slow
        self.mode = "ok"
        self.refuse_first = 0  # the first this many requests are refused (400), whatever the mode
        self.received: list[Delivery] = []
        self.broken = 0
        self.port = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/events"

    def start(self) -> str:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                if len(body) < length:  # the connection closed mid-body: no request was made
                    with receiver._lock:
                        receiver.broken += 1
                    self.close_connection = True
                    return
                receiver._take(self, body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self.url

    def __enter__(self) -> Receiver:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _take(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        signed = verify(handler.headers.get("Recall-Signature") or "", body, self.keys, self.now())
        try:
            event = json.loads(body)
        except ValueError:
            event = {}
        with self._lock:
            mode = "refuse" if len(self.received) < self.refuse_first else self.mode
        if mode == "slow":
            time.sleep(self.slow)
        status = {"refuse": 400, "unavailable": 503, "redirect": 307}.get(mode, 200)
        if not signed:
            status = 401
        with self._lock:
            self.received.append(
                Delivery(
                    event.get("id"),
                    event.get("type"),
                    signed,
                    handler.headers.get("Content-Type") or "",
                    event.get("data") or {},
                    status,
                )
            )
        handler.send_response(status)
        if status == 307:
            handler.send_header("Location", "http://169.254.169.254/latest/meta-data/")
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    def accepted(self) -> list[Delivery]:
        with self._lock:
            return [d for d in self.received if d.status == 200]

    def all(self) -> list[Delivery]:
        with self._lock:
            return list(self.received)
