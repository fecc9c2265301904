"""Where the probe and metrics endpoints listen (both address families where the host has
IPv6) and how long a silent client may hold a connection."""

from __future__ import annotations

import socket
import threading
import urllib.request
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest

from recall.base import endpoint, metrics


def ok(target: str) -> tuple[int, str, bytes] | None:
    return (200, "text/plain", b"ok\n") if target == "/healthz" else None


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


def started() -> ThreadingHTTPServer:
    httpd = endpoint.make(ok, 0)  # the default address, a free port
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    httpd = started()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def get(host: str, port: int) -> bytes:
    with urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=5) as answer:
        body: bytes = answer.read()
    return body


def test_default_address__ipv4_always_and_ipv6_where_the_host_has_it(
    server: ThreadingHTTPServer,
) -> None:
    port = server.server_address[1]
    assert get("127.0.0.1", port) == b"ok\n"
    if ipv6_loopback():
        assert endpoint.any_address() == "::"
        assert get("[::1]", port) == b"ok\n"
    else:
        assert endpoint.any_address() == "0.0.0.0"


def test_no_ipv6__listens_on_ipv4_any(monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint.any_address.cache_clear()
    monkeypatch.setattr(socket, "has_ipv6", False)
    try:
        assert endpoint.any_address() == "0.0.0.0"
        httpd = endpoint.make(ok, 0)
        try:
            assert httpd.address_family == socket.AF_INET
        finally:
            httpd.server_close()
    finally:
        endpoint.any_address.cache_clear()


def test_silent_client__dropped_after_the_request_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(endpoint, "REQUEST_TIMEOUT", 0.2, raising=False)
    httpd = started()
    try:
        with socket.create_connection(("127.0.0.1", httpd.server_address[1]), timeout=10) as c:
            # Sends nothing: the server closes the connection (recv returns b"") well before
            # our own 10 s timeout would raise.
            assert c.recv(1) == b""
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_metrics__served_on_both_families() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    metrics.serve(port)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        assert b"recall_claims_total" in answer.read()
    if ipv6_loopback():
        with urllib.request.urlopen(f"http://[::1]:{port}/metrics", timeout=5) as answer:
            assert b"recall_claims_total" in answer.read()
