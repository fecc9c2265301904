"""One delivery against real sinks on 127.0.0.1 (threads of this test, no other network): the
request's deadline against trickling sinks, a bounded read of a huge answer, invalid URLs and
certificates refused, Retry-After as seconds or a date, connections never shared across host
names; and a Secret the operator may not read, waiting as a missing key does."""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
import socket
import ssl
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from recall.kube import ApiError
from recall.media.fetch import display_url
from recall.operator.notify.send import Sender, retry_after
from recall.operator.notify.sign import HEADER, sign
from recall.operator.notify.transport import IpAddress, Outcome
from recall.resources import Published
from recall_dev.twin.api import MemoryApi
from recall_dev.twin.clock import FakeClock
from tests.unit.fakes import NS, claim, job_manifest, result_of
from tests.unit.operator.test_notify import FakeSender, delivered_once_keyed, notifier

Serve = Callable[[socket.socket, threading.Event], None]
NAMES = {"a.example": "127.0.0.1", "b.example": "127.0.0.1"}
OK = b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n"


class Pinned(Sender):
    """A Sender whose resolver knows `NAMES` only: no test asks a real DNS server."""

    def resolve(self, host: str, port: int) -> list[IpAddress]:
        try:
            return [ipaddress.ip_address(NAMES.get(host, host))]
        except ValueError:
            raise socket.gaierror(f"{host}: not a test name") from None


class Peer:
    """A sink on 127.0.0.1: each connection is answered by `serve(conn, stop)` in a thread;
    `close` stops every thread (it wakes blocked ones by shutting their sockets down)."""

    def __init__(self, serve: Serve, tls: ssl.SSLContext | None = None) -> None:
        self.serve = serve
        self.tls = tls
        self.stop = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()
        self._start(self._accept)

    def _start(self, target: Callable[..., None], *args: Any) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)
        with self.lock:
            self.threads.append(t)
        t.start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            conn.settimeout(10)  # a safety net: no thread outlives a broken test for long
            with self.lock:
                self.conns.append(conn)
            self._start(self._answer, conn)

    def _answer(self, conn: socket.socket) -> None:
        try:
            if self.tls is not None:
                raw, conn = conn, self.tls.wrap_socket(conn, server_side=True)
                with self.lock:
                    self.conns[self.conns.index(raw)] = conn
            self.serve(conn, self.stop)
        except OSError:
            pass  # the client went away, or refused our certificate
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        for s in [self.listener, *self.conns]:
            with suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        with self.lock:
            threads = list(self.threads)
        for t in threads:
            t.join(timeout=10)
        assert not any(t.is_alive() for t in threads)


@contextmanager
def peer(serve: Serve, tls: ssl.SSLContext | None = None) -> Iterator[Peer]:
    p = Peer(serve, tls)
    try:
        yield p
    finally:
        p.close()


@contextmanager
def sender(**kw: Any) -> Iterator[Pinned]:
    s = Pinned(allow=["127.0.0.1"], **kw)
    try:
        yield s
    finally:
        s.close()


def read_request(conn: socket.socket) -> tuple[dict[str, str], bytes] | None:
    """One HTTP/1.1 request's headers (lower-case names) and body; None at the end."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")[1:]
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}
    while len(body) < int(headers.get("content-length", "0")):
        chunk = conn.recv(65536)
        if not chunk:
            return None
        body += chunk
    return headers, body


def answering(response: bytes, seen: list[tuple[int, str]] | None = None) -> Serve:
    """Answers every request of a connection with `response`; `seen`: (connection, Host)."""

    def serve(conn: socket.socket, stop: threading.Event) -> None:
        while (request := read_request(conn)) is not None:
            if seen is not None:
                seen.append((id(conn), request[0]["host"]))
            conn.sendall(response)

    return serve


def post(s: Sender, url: str) -> Any:
    body = b'{"id": "e1"}'
    return s.post(url, {HEADER: sign(body, [b"k"], int(time.time()))}, body)


# -- the deadline ---------------------------------------------------------------------------


@pytest.mark.parametrize("part", ["headers", "body"])
def test_post__a_sink_trickling_its_answer_is_cut_at_the_deadline(part: str) -> None:
    head = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 100000\r\n\r\n"
    trickled = head + b"x" * 1000 if part == "headers" else b"x" * 1000
    answered = threading.Event()

    def serve(conn: socket.socket, stop: threading.Event) -> None:
        read_request(conn)
        if part == "body":
            conn.sendall(head)
        for i in range(len(trickled)):  # a byte every 20 ms: each read is quick, the answer not
            conn.sendall(trickled[i : i + 1])
            if stop.wait(0.02) or answered.is_set():
                return

    with peer(serve) as p, sender(timeout=1) as s:
        start = time.monotonic()
        answer = post(s, f"http://a.example:{p.port}/events")
        elapsed = time.monotonic() - start
        answered.set()
    assert elapsed < 4.0  # 1 s, and room for a loaded machine (per read only: 20 s)
    assert answer.outcome is Outcome.UNAVAILABLE
    if part == "headers":
        assert answer.status is None and "within 1 s" in (answer.error or "")
    else:  # the status came in time: it is the answer, the body is cut
        assert answer.status == 500 and re.fullmatch(r"HTTP 500: x+", answer.error or "")


def test_post__a_sink_that_never_answers_is_unavailable_after_the_deadline() -> None:
    def serve(conn: socket.socket, stop: threading.Event) -> None:
        read_request(conn)
        stop.wait()

    with peer(serve) as p, sender(timeout=0.3) as s:
        answer = post(s, f"http://a.example:{p.port}/events")
        assert answer.outcome is Outcome.UNAVAILABLE and "within 0.3 s" in (answer.error or "")
        answer = post(s, f"http://a.example:{p.port}/events")  # its own deadline again
        assert answer.outcome is Outcome.UNAVAILABLE


# -- a huge answer ----------------------------------------------------------------------------


def test_post__a_huge_answer_is_not_read_whole() -> None:
    chunk = b"boom: the sink failed\n" + b"\0" * 65000
    sent = [0]
    finished = threading.Event()

    def serve(conn: socket.socket, stop: threading.Event) -> None:
        read_request(conn)
        conn.sendall(b"HTTP/1.1 500 Oops\r\nContent-Length: 400000000\r\n\r\n")
        try:
            while sent[0] < 64 << 20 and not stop.is_set():  # 64 of the 400 MB, then waits
                conn.sendall(chunk)
                sent[0] += len(chunk)
            conn.recv(1)  # until the client closes
        finally:
            finished.set()

    with peer(serve) as p, sender(timeout=3) as s:
        tracemalloc.start()
        try:
            answer = post(s, f"http://a.example:{p.port}/events")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert finished.wait(5)  # the client closed the connection
    assert answer.outcome is Outcome.UNAVAILABLE and answer.status == 500
    assert answer.error == "HTTP 500: boom: the sink failed"
    assert peak < 4 << 20
    assert sent[0] < 32 << 20  # what the sockets' buffers held, not the body


# -- invalid URLs -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://user:s3cret@127.0.0.1:99999/events",
        "http://user:s3cret@127.0.0.1:0/events",
        "http://user:s3cret@[::1/events",
        "https://user:s3cret@" + "a" * 64 + ".example/events",
        "https://user:s3cret@xn--a.example/events",
        "https://user:s3cret@a..example/events",
        "http://user:s3cret@exa mple.com/events",
        "ftp://user:s3cret@a.example/events",
    ],
)
def test_post__an_invalid_url_is_refused_naming_it_without_credentials(url: str) -> None:
    with sender() as s:
        answer = post(s, url)
    assert answer.outcome is Outcome.REFUSED
    assert "s3cret" not in (answer.error or "") and "user:" not in (answer.error or "")
    assert display_url(url) in (answer.error or "")


def test_notifier__an_invalid_url_is_given_up_not_retried_for_ever() -> None:
    """Given up after `max_refusals`; its password and token (its user info and query) are in no
    log line and no Kubernetes Event anyone who lists events reads."""
    store, clock = MemoryApi(), FakeClock()
    store.put_secret(NS, "s", {"hmac": b"k"})
    url = "http://user:s3cret@127.0.0.1:99999/events?token=t0ken"
    finished_job(store, clock, "j", url)
    s = Pinned(allow=["127.0.0.1"])
    n = notifier(store, clock, s, max_refusals=3)
    try:
        with capture_logs() as logs:
            for _ in range(6):
                n.run_once()
                clock.step(8)
    finally:
        s.close()
    job = store.get_job(NS, "j")
    assert job is not None and job.status.notified is not None
    assert job.status.notified.time is not None and job.status.notified.attempts == 3
    error = job.status.notified.last_error or ""
    assert "invalid sink URL http://***@127.0.0.1:99999/events?…" in error
    assert [e["reason"] for e in store.events] == ["NotifyGivenUp"]
    said = [str(e.get("message", "")) for e in store.events]
    seen = [str(line) for line in logs if "sink" in line]
    assert seen and all("s3cret" not in x and "t0ken" not in x for x in [error, *seen, *said])


# -- Retry-After ------------------------------------------------------------------------------

NOW = dt.datetime(2099, 10, 21, 7, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("120", 120.0),
        ("-5", 0.0),
        ("Wed, 21 Oct 2099 07:28:00 GMT", 1680.0),
        ("Wed, 21 Oct 2099 07:28:00 -0000", 1680.0),
        ("Tue, 20 Oct 2099 07:28:00 GMT", 0.0),  # past: at once
        ("soon", None),
        ("inf", None),
        ("", None),
        (None, None),
    ],
)
def test_retry_after__seconds_or_an_http_date(value: str | None, seconds: float | None) -> None:
    assert retry_after(value, NOW) == seconds


def test_post__retry_after_as_a_date_is_taken_from_the_clock() -> None:
    clock = FakeClock(wall=NOW)
    date = "Wed, 21 Oct 2099 07:02:00 GMT"
    response = f"HTTP/1.1 503 Busy\r\nRetry-After: {date}\r\nContent-Length: 0\r\n\r\n"
    with peer(answering(response.encode())) as p, sender(clock=clock) as s:
        answer = post(s, f"http://a.example:{p.port}/events")
    assert answer.outcome is Outcome.UNAVAILABLE and answer.retry_after == 120.0


# -- TLS ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    pytest.importorskip("cryptography")
    return make_pki()


def make_pki() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context with a certificate for a.example only, and a client context that
    trusts its CA (and nothing else)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)

    def certificate(
        subject: str, key: Any, issuer: x509.Certificate | None, signer: Any, ca: bool
    ) -> x509.Certificate:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
        b = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(issuer.subject if issuer else name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()), False
            )
        )
        if ca:
            b = b.add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False), True
            )
        else:
            b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName(subject)]), False)
        return b.sign(signer, hashes.SHA256())

    ca_key, leaf_key = (
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP256R1()),
    )
    ca = certificate("recall test CA", ca_key, None, ca_key, True)
    leaf = certificate("a.example", leaf_key, ca, ca_key, False)
    pem = serialization.Encoding.PEM
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.TemporaryDirectory() as d:
        cert, key = Path(d) / "cert.pem", Path(d) / "key.pem"
        cert.write_bytes(leaf.public_bytes(pem))
        key.write_bytes(
            leaf_key.private_bytes(
                pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        server.load_cert_chain(cert, key)
    client = ssl.create_default_context(cadata=ca.public_bytes(pem).decode())
    return server, client


def test_post__a_certificate_that_fails_verification_is_a_refusal(
    pki: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    server, _ = pki
    with peer(answering(OK), tls=server) as p, sender() as s:  # the public CAs only
        answer = post(s, f"https://a.example:{p.port}/events")
    assert answer.outcome is Outcome.REFUSED
    assert "TLS certificate of a.example not accepted" in (answer.error or "")
    assert "CERTIFICATE_VERIFY_FAILED" in (answer.error or "")


def test_post__a_connection_is_reused_for_its_own_host_name_only(
    pki: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    server, client = pki
    seen: list[tuple[int, str]] = []
    with peer(answering(OK, seen), tls=server) as p, sender(ssl_context=client) as s:
        assert post(s, f"https://a.example:{p.port}/events").outcome is Outcome.DELIVERED
        # b.example has the same address but no certificate here: never a.example's connection
        answer = post(s, f"https://b.example:{p.port}/events")
        assert answer.outcome is Outcome.REFUSED
        assert "not valid for 'b.example'" in (answer.error or "")
        assert post(s, f"https://a.example:{p.port}/events").outcome is Outcome.DELIVERED
    assert [host for _, host in seen] == [f"a.example:{p.port}"] * 2
    assert seen[0][0] == seen[1][0]  # kept alive for its own name


def test_post__plain_http_connections_are_kept_per_host_name() -> None:
    seen: list[tuple[int, str]] = []
    with peer(answering(OK, seen)) as p, sender() as s:
        for host in ["a.example", "b.example", "a.example", "b.example"]:
            assert post(s, f"http://{host}:{p.port}/events").outcome is Outcome.DELIVERED
    hosts = {conn: {h for c, h in seen if c == conn} for conn, _ in seen}
    assert len(hosts) == 2 and all(len(h) == 1 for h in hosts.values())


# -- a Secret the operator may not read --------------------------------------------------------


class Forbidden(MemoryApi):
    """A store whose Secrets the operator may not read (403) while `forbidden`."""

    def __init__(self) -> None:
        super().__init__()
        self.forbidden = True
        self.reads = 0

    def get_secret(self, namespace: str, name: str) -> dict[str, bytes] | None:
        self.reads += 1
        if self.forbidden:
            raise ApiError(f'secrets "{name}" is forbidden', status=403)
        return super().get_secret(namespace, name)


def finished_job(store: MemoryApi, clock: FakeClock, name: str, url: str) -> None:
    sinks = [{"url": url, "secretRef": {"name": "s", "key": "hmac"}}]
    store.create_job(NS, job_manifest(name, notify=sinks))
    h = claim(store, clock, name)
    h.complete(result_of(h))
    store.patch_job_status(NS, name, None, {"published": Published(time=clock.now()).to_api()})


def test_notifier__an_unreadable_secret_waits_as_a_missing_key_and_says_why() -> None:
    store, clock = Forbidden(), FakeClock()
    finished_job(store, clock, "j", "https://sink.example/events")
    s = FakeSender()
    n = notifier(store, clock, s)
    for _ in range(3):
        n.run_once()
    assert store.reads == 1 and s.sent == []  # not read again before secret_seconds
    job = store.get_job(NS, "j")
    assert job is not None and job.status.notified is not None
    assert job.status.notified.time is None
    assert 'cannot be read: secrets "s" is forbidden' in (job.status.notified.last_error or "")
    assert [c.reason for c in job.status.conditions if c.type == "Notified"] == ["KeyMissing"]
    assert [e["reason"] for e in store.events] == ["NotifyKeyMissing"]
    clock.step(30)
    n.run_once()
    assert store.reads == 2 and len(store.events) == 1  # read again; warned once per sink
    store.forbidden = False
    delivered_once_keyed(store, clock, n, s.sent, b"k")
