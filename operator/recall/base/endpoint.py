"""A small HTTP endpoint that answers GET: the probes' (`/healthz`, `/readyz`) and KEDA's.

`route(target)` maps the request target, query included, to (status, content type, body), or
None for a 404. `make` builds the server unstarted (port 0 binds a free port, in
`server_address`); `serve` starts it on a daemon thread named `name`, and for port 0 serves
nothing and returns None. No access log: the callers poll every few seconds. Not provided:
other methods (501), TLS, authentication (the chart's NetworkPolicy opens the ports to the
kubelet and KEDA only).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Route = Callable[[str], tuple[int, str, bytes] | None]


def make(route: Route, port: int, addr: str = "0.0.0.0") -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            answer = route(self.path)
            if answer is None:
                self.send_error(404)
                return
            status, content_type, body = answer
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            del format, args

    return ThreadingHTTPServer((addr, port), Handler)


def serve(route: Route, port: int, name: str, addr: str = "0.0.0.0") -> ThreadingHTTPServer | None:
    if not port:
        return None
    server = make(route, port, addr)
    threading.Thread(target=server.serve_forever, name=name, daemon=True).start()
    return server
