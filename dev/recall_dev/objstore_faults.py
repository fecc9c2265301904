"""A fault proxy in front of the object store's S3 port, for chaos and integration tests.

    with FaultProxy(store.s3_port) as proxy:      # clients use proxy.endpoint
        proxy.delay(2.0)                          # slow store: every request waits 2 s
        proxy.lose_answers({"PUT"})               # the PUT is applied, its answer is lost
        proxy.down()                              # nothing listens: connections are refused
        proxy.heal()                              # all of it undone

It speaks just enough HTTP/1.1 to see where one request and one answer end (Content-Length,
chunked transfer coding, bodiless answers), so a fault hits one request, not a byte stream.
Clients sign their requests for the proxy's host and port, and the proxy forwards them
unchanged, so SigV4 signatures and presigned URLs stay valid through it.

Contract:
- Faults switch at runtime from any thread and apply to the next request (a request in
  flight finishes under the rules it started with).
- `delay(s)`: each request is held `s` seconds before it is forwarded.
- `lose_answers(methods, how)`: a request with one of `methods` is forwarded, its answer is
  read in full (so the store has applied it), and then the client gets no answer: with
  `how="reset"` its connection is reset (RST), with `how="hang"` it is held open, silent,
  until the client gives up or the fault is healed. `count` limits how many are lost.
- `down()`: the listening socket is closed and every open connection reset, so connects are
  refused (ECONNREFUSED) as by a store that is not running; `up()` listens again on the same
  port. `heal()` clears every fault and listens again.
- `stats` counts requests forwarded and answers lost, per method.
- `close()` stops the proxy and its threads; loopback only (127.0.0.1).

Not provided: TLS, HTTP/2, `Expect: 100-continue`, pipelined requests.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

import structlog

log = structlog.get_logger("recall_dev.objstore_faults")

LostHow = Literal["reset", "hang"]
MAX_HEAD = 64 * 1024


@dataclass
class Faults:
    """What the proxy does to the next request (see the module contract)."""

    delay: float = 0.0
    lose_methods: frozenset[str] = frozenset()
    lose_how: LostHow = "reset"
    lose_left: int | None = None  # None: every matching request
    down: bool = False


@dataclass
class FaultStats:
    forwarded: Counter[str] = field(default_factory=Counter)
    lost: Counter[str] = field(default_factory=Counter)


class _Closed(Exception):
    """The peer closed its side mid-message (or before a new one)."""


class FaultProxy:
    """A loopback HTTP proxy to `127.0.0.1:<upstream_port>` that injects faults."""

    def __init__(self, upstream_port: int, port: int = 0) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.port = port
        self.stats = FaultStats()
        self._faults = Faults()
        self._lock = threading.Lock()
        self._healed = threading.Event()
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._closed = False
        self._listen()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- switching faults ----------------------------------------------------------------------

    def delay(self, seconds: float) -> None:
        with self._lock:
            self._faults.delay = seconds

    def lose_answers(
        self, methods: Iterable[str] = ("PUT",), how: LostHow = "reset", count: int | None = None
    ) -> None:
        with self._lock:
            self._faults.lose_methods = frozenset(m.upper() for m in methods)
            self._faults.lose_how = how
            self._faults.lose_left = count
            self._healed.clear()

    def down(self) -> None:
        """Refuse connections from now on, and reset the ones open."""
        with self._lock:
            self._faults.down = True
            listener, self._listener = self._listener, None
            conns = list(self._conns)
        if listener is not None:
            # shutdown() first: a bare close() leaves the socket listening while the accept
            # thread is blocked in accept() on it.
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for conn in conns:
            _abort(conn)
        log.info("objstore_proxy_down", port=self.port)

    def up(self) -> None:
        with self._lock:
            self._faults.down = False
        if self._listener is None:
            self._listen()
            log.info("objstore_proxy_up", port=self.port)

    def heal(self) -> None:
        with self._lock:
            self._faults = Faults(down=self._faults.down)
            self._healed.set()
        self.up()

    def close(self) -> None:
        self._closed = True
        self.down()
        self._healed.set()

    # -- serving -------------------------------------------------------------------------------

    def _listen(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(
            target=self._accept, args=(listener,), name=f"objstore-proxy-{self.port}", daemon=True
        ).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed by down()
            with self._lock:
                self._conns.add(client)
            threading.Thread(
                target=self._serve, args=(client,), name="objstore-proxy-conn", daemon=True
            ).start()

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            while not self._closed:
                head, body = _read_message(client, request_method=None)
                method = head.split(b" ", 1)[0].decode("ascii", "replace").upper()
                with self._lock:
                    faults = dataclasses.replace(self._faults)
                    lose = method in faults.lose_methods and faults.lose_left != 0
                    if lose and self._faults.lose_left is not None:
                        self._faults.lose_left -= 1
                if faults.delay > 0:
                    time.sleep(faults.delay)
                if upstream is None:
                    upstream = socket.create_connection(self.upstream, timeout=300)
                    with self._lock:
                        self._conns.add(upstream)
                upstream.sendall(head + body)
                answer_head, answer_body = _read_message(upstream, request_method=method)
                with self._lock:
                    self.stats.forwarded[method] += 1
                    if lose:
                        self.stats.lost[method] += 1
                if lose:
                    log.info("objstore_answer_lost", method=method, how=faults.lose_how)
                    if faults.lose_how == "hang":
                        self._healed.wait()
                    _abort(client)
                    return
                client.sendall(answer_head + answer_body)
                if _closes(answer_head):
                    return
        except (_Closed, OSError):
            pass
        finally:
            with self._lock:
                self._conns.discard(client)
                if upstream is not None:
                    self._conns.discard(upstream)
            client.close()
            if upstream is not None:
                upstream.close()


# -- HTTP/1.1 framing --------------------------------------------------------------------------


def _read_message(sock: socket.socket, request_method: str | None) -> tuple[bytes, bytes]:
    """One request (`request_method` None) or one answer to `request_method`: head, body."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise _Closed
        buf += chunk
        if len(buf) > MAX_HEAD:
            raise _Closed
    head, rest = buf.split(b"\r\n\r\n", 1)
    head += b"\r\n\r\n"
    headers = _headers(head)
    if request_method is not None:
        status = int(head.split(b" ", 2)[1])
        if request_method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return head, rest
    if "chunked" in headers.get("transfer-encoding", ""):
        return head, _read_chunked(sock, rest)
    if "content-length" in headers:
        return head, _read_exact(sock, rest, int(headers["content-length"]))
    if request_method is None:
        return head, rest  # a request without a body
    return head, _read_to_close(sock, rest)


def _headers(head: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in head.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if sep:
            out[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1").lower()
    return out


def _closes(head: bytes) -> bool:
    return _headers(head).get("connection") == "close"


def _read_exact(sock: socket.socket, have: bytes, length: int) -> bytes:
    while len(have) < length:
        chunk = sock.recv(min(1 << 20, length - len(have)))
        if not chunk:
            raise _Closed
        have += chunk
    return have


def _read_chunked(sock: socket.socket, have: bytes) -> bytes:
    """The chunked body as sent (sizes, data, trailers), read up to its final CRLF."""
    body, pos = have, 0
    while True:
        while b"\r\n" not in body[pos:]:
            body = _more(sock, body)
        line_end = body.index(b"\r\n", pos)
        size = int(body[pos:line_end].split(b";", 1)[0], 16)
        pos = line_end + 2
        if size == 0:
            while b"\r\n\r\n" not in body[pos - 2 :]:
                body = _more(sock, body)
            return body[: body.index(b"\r\n\r\n", pos - 2) + 4]
        body = _read_exact(sock, body, pos + size + 2)
        pos += size + 2


def _more(sock: socket.socket, have: bytes) -> bytes:
    chunk = sock.recv(65536)
    if not chunk:
        raise _Closed
    return have + chunk


def _read_to_close(sock: socket.socket, have: bytes) -> bytes:
    with contextlib.suppress(OSError):
        while chunk := sock.recv(65536):
            have += chunk
    return have


def _abort(sock: socket.socket) -> None:
    """Make the owning thread's close an RST (SO_LINGER 0: the peer sees 'connection reset',
    not a clean end), and wake that thread if it is blocked reading (SHUT_RD sends nothing)."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RD)
