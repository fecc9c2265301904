"""A small HTTP endpoint that answers GET: the probes' (`/healthz`, `/readyz`) and KEDA's
(`/metrics` is prometheus_client's own server, on `any_address()` too).

`route(target)` maps the request target, query included, to (status, content type, body), or
None for a 404. `make` builds the server unstarted (port 0 binds a free port, in
`server_address`); `serve` starts it on a daemon thread named `name`, and for port 0 serves
nothing and returns None. No access log: the callers poll every few seconds. Not provided:
other methods (501), TLS, authentication (the chart's NetworkPolicy opens the ports to the
kubelet, Prometheus and KEDA only).

Where it listens: by default on every address of both families (`any_address()`: "::" with
IPV6_V6ONLY off, so IPv4 clients arrive as ::ffff:a.b.c.d), or on 0.0.0.0 where the host has
no IPv6; so the kubelet's probes reach it on IPv4, IPv6 and dual-stack clusters alike. A client
that connects and sends nothing is dropped after `REQUEST_TIMEOUT` seconds, not served by a
thread forever.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Route = Callable[[str], tuple[int, str, bytes] | None]
REQUEST_TIMEOUT = 10.0  # seconds a connection may sit without a request (or while sending it)


@functools.cache
def any_address() -> str:
    """ "::" where a socket can listen on both IPv6 and IPv4 at once, else "0.0.0.0"."""
    if not socket.has_ipv6:
        return "0.0.0.0"
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            s.bind(("::", 0))
    except OSError:  # IPv6 disabled in the kernel or the pod's network namespace
        return "0.0.0.0"
    return "::"


def cluster_any_address() -> str:
    """The any-address of the cluster's own family, for a server that cannot listen on both
    (asyncio sets IPV6_V6ONLY on every IPv6 socket: kopf's liveness endpoint): "::" when the
    API server's Service address (KUBERNETES_SERVICE_HOST) is IPv6, the primary family of an
    IPv6 single-stack or IPv6-first cluster, else "0.0.0.0"."""
    try:
        ip = ipaddress.ip_address(os.environ.get("KUBERNETES_SERVICE_HOST", ""))
    except ValueError:
        return "0.0.0.0"
    return "::" if ip.version == 6 and any_address() == "::" else "0.0.0.0"


class _Server(ThreadingHTTPServer):
    """A threading HTTP server whose family follows its address; dual-stack on "::"."""

    daemon_threads = True

    def __init__(self, addr: str, port: int, handler: type[BaseHTTPRequestHandler]) -> None:
        self.address_family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        super().__init__((addr, port), handler)

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6:
            # Linux defaults to dual-stack, but the sysctl (net.ipv6.bindv6only) may say no.
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


def make(route: Route, port: int, addr: str | None = None) -> ThreadingHTTPServer:
    """The server unstarted, on `addr` (None: `any_address()`)."""

    class Handler(BaseHTTPRequestHandler):
        timeout = REQUEST_TIMEOUT  # StreamRequestHandler sets it on the connection

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

    return _Server(any_address() if addr is None else addr, port, Handler)


def serve(
    route: Route, port: int, name: str, addr: str | None = None
) -> ThreadingHTTPServer | None:
    if not port:
        return None
    server = make(route, port, addr)
    threading.Thread(target=server.serve_forever, name=name, daemon=True).start()
    return server
