"""The network under each event's request: the answer types, the address check (SSRF), and
connections opened only to checked addresses, every wait bounded by the request's deadline.

- `refused(address, allow)`: why a sink may not be reached at an address (loopback,
  link-local, unspecified, multicast, a cloud metadata address) unless `allow` names it.
- `Connector`: httpcore's network backend for a `Dialer` (the `Sender`): it connects to the
  addresses the dialer checked, and wraps each connection in a `Stream` whose reads, writes
  and TLS handshake wait at most what is left of the request's deadline (`Deadline`, per
  thread). A certificate that fails verification ends the request as a refusal (`Stop`).
"""

from __future__ import annotations

import ipaddress
import ssl
import threading
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

import httpcore

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Metadata services outside the link-local ranges (Alibaba Cloud, Oracle Cloud's v2).
METADATA = (ipaddress.ip_network("100.100.100.200/32"), ipaddress.ip_network("192.0.0.192/32"))

WRITE_PIECE = 65536  # a write waits this much at a time, so the deadline bounds a slow reader
TRANSPORT_ERRORS = (
    httpcore.NetworkError,
    httpcore.ProtocolError,
    httpcore.ProxyError,
    httpcore.UnsupportedProtocol,
)


class Outcome(StrEnum):
    DELIVERED = "delivered"
    UNAVAILABLE = "unavailable"  # try again later: the sink as a whole backs off
    REFUSED = "refused"  # this event was refused: bounded tries, then given up


@dataclass(frozen=True)
class Answer:
    outcome: Outcome
    status: int | None = None
    error: str | None = None
    retry_after: float | None = None


def refused(address: IpAddress, allow: Sequence[IpNetwork]) -> str | None:
    """Why a sink may not be reached at `address` (None: it may)."""
    if any(address in net for net in allow):
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return refused(address.ipv4_mapped, allow)
    if address.is_loopback:
        return f"{address} is a loopback address"
    if address.is_link_local:
        return f"{address} is a link-local address (metadata services live there)"
    if address.is_unspecified or address.is_multicast:
        return f"{address} is not a unicast address"
    if any(address in net for net in METADATA) or str(address) == "fd00:ec2::254":
        return f"{address} is a cloud metadata address"
    return None


class Stop(Exception):
    """Ends a request with `answer` (a refused address, a certificate not accepted)."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(answer.error)
        self.answer = answer


class Deadline(threading.local):
    """The deadline of the request the current thread makes (monotonic; None: none)."""

    at: float | None = None


Bound = Callable[[float | None, type[Exception]], float | None]


class Stream(httpcore.NetworkStream):
    """A connection whose every wait ends by the deadline of the request using it."""

    def __init__(self, inner: httpcore.NetworkStream, bound: Bound) -> None:
        self._inner = inner
        self._bound = bound

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._bound(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        for i in range(0, len(buffer), WRITE_PIECE):
            piece = buffer[i : i + WRITE_PIECE]
            self._inner.write(piece, self._bound(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        bounded = self._bound(timeout, httpcore.ConnectTimeout)
        try:
            inner = self._inner.start_tls(ssl_context, server_hostname, bounded)
        except httpcore.ConnectError as e:
            if isinstance(e.__cause__, ssl.SSLCertVerificationError):
                error = f"TLS certificate of {server_hostname} not accepted: {e.__cause__}"
                raise Stop(Answer(Outcome.REFUSED, error=error[:300])) from e
            raise
        return Stream(inner, self._bound)

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class Connector(httpcore.NetworkBackend):
    """Opens a Sender's connections: to a checked address of the host, bounded by the deadline."""

    def __init__(self, sender: Dialer) -> None:
        self._sender = sender
        self._tcp = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        failed: httpcore.ConnectError | None = None
        for address in self._sender.checked(host, port):  # each one checked; the first that answers
            bounded = self._sender.bound(timeout, httpcore.ConnectTimeout)
            try:
                stream = self._tcp.connect_tcp(
                    str(address), port, bounded, local_address, socket_options
                )
            except httpcore.ConnectError as e:
                failed = e
                continue
            return Stream(stream, self._sender.bound)
        assert failed is not None  # `checked` never returns no address
        raise failed


class Dialer(typing.Protocol):
    """What a `Connector` asks of its sender."""

    def checked(self, host: str, port: int) -> list[IpAddress]: ...

    def bound(self, timeout: float | None, expired: type[Exception]) -> float | None: ...
