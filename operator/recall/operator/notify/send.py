"""One delivery: an HTTP POST of an event to a sink, and what its answer means.

    sender = Sender(allow=["127.0.0.1"], timeout=10)
    answer = sender.post(url, headers, body)     # never raises; answer.outcome says what to do

Safety (SSRF): the sink's host is resolved when a connection to it is opened and every address
it resolves to is checked: a loopback, link-local (where metadata services live), unspecified,
multicast or other metadata address is refused unless `allow` names it. The connection goes to
a checked address itself, so a DNS answer that changes in between (rebinding) cannot move it.
Connections are pooled per scheme, host name and port: a connection (and the certificate
checked on it, against the sink's own name) is never reused for another name that resolves to
the same address. Redirects are never followed: a 3xx is a refusal. The chart's admission
policy refuses such URLs too; this is the check that holds when DNS says otherwise later.

Bounds: a request has one deadline, `timeout` seconds from its start, over every wait it makes
(a free connection, connecting, TLS, sending, the answer's headers and body), however slowly a
sink trickles its bytes; past it the sink is unavailable. Resolving the host (the system's
resolver) is outside that deadline. At most `HEAD_BYTES` of the answer's body are read.

Outcomes (`classify`, pure): 2xx delivered; 408, 429, 5xx and transport errors: the sink is
unavailable (it backs off as a whole: one probe at a time until it answers); any other answer
refuses this event, given up after a bounded number of tries. So do a URL that cannot be a
sink's (not http(s), a port out of range, an invalid host name) and a TLS certificate that
fails verification: configuration errors, which no retry mends. Errors name the URL without
its user information or query (`display_url`). The network layer, the address check and the
answer types are `transport`'s.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import ipaddress
import math
import re
import socket
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpcore
import httpx

from recall.base.clock import SYSTEM, Clock
from recall.media.fetch import display_url
from recall.operator.notify.transport import (
    TRANSPORT_ERRORS,
    Answer,
    Connector,
    Deadline,
    IpAddress,
    Outcome,
    Stop,
    refused,
)

HEAD_BYTES = 4096  # of an answer's body, read at most (the network reads it 64 KiB at a time)
SHOWN = 200  # characters of an answer's body an error keeps
_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)", re.IGNORECASE)


def classify(status: int) -> Outcome:
    if 200 <= status < 300:
        return Outcome.DELIVERED
    if status in (408, 429) or status >= 500:
        return Outcome.UNAVAILABLE
    return Outcome.REFUSED


def retry_after(value: str | None, now: dt.datetime) -> float | None:
    """The seconds a `Retry-After` value asks to wait (pure): delay-seconds or an HTTP-date
    (RFC 9110 §10.2.3) taken from `now` (the wall clock, UTC); never negative, None when absent
    or unreadable. The caller caps it (`state.answered`: to the backoff's cap)."""
    if not value or not value.strip():
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value.strip())
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when.tzinfo is None:  # "-0000": UTC, as HTTP-dates are
            when = when.replace(tzinfo=dt.UTC)
        seconds = (when - now).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _host_invalid(host: str) -> str | None:
    """Why `host` (ASCII, IDNA-encoded) is no host name (None: it is one)."""
    name = host[:-1] if host.endswith(".") else host
    if not name or len(name) > 253:
        return "the host name is empty or too long"
    for label in name.split("."):
        if not _LABEL.fullmatch(label):
            return f"{label!r} is not a valid label of a host name"
        if label.lower().startswith("xn--"):
            try:
                label.encode("ascii").decode("idna")
            except UnicodeError:
                return f"{label!r} is not a valid IDNA label"
    return None


@dataclass(frozen=True)
class _Target:
    url: httpcore.URL
    host: str  # ASCII: the IDNA form of a name, or an address
    netloc: str  # the Host header


def _target(url: str) -> _Target | Answer:
    """Where `url` sends a request, or the refusal of a URL that cannot be a sink's."""
    shown = display_url(url)  # no user info nor query: they may hold a secret
    try:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return Answer(Outcome.REFUSED, error=f"not an http(s) URL: {shown}")
        port = parts.port  # ValueError when out of range
        if port == 0:
            raise ValueError("port 0")
        parsed = httpx.URL(url)  # the IDNA form of the name, the path percent-encoded
        host = parsed.raw_host.decode("ascii")
    except (ValueError, httpx.InvalidURL) as e:  # UnicodeError (IDNA) is a ValueError
        return Answer(Outcome.REFUSED, error=f"invalid sink URL {shown}: {e}"[:300])
    try:
        literal: IpAddress | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    why = _host_invalid(host) if literal is None else None
    if why is not None:
        return Answer(Outcome.REFUSED, error=f"invalid sink URL {shown}: {why}"[:300])
    default = 443 if parts.scheme == "https" else 80
    shown_host = f"[{host}]" if literal is not None and literal.version == 6 else host
    netloc = shown_host if port is None or port == default else f"{shown_host}:{port}"
    return _Target(
        httpcore.URL(
            scheme=parts.scheme.encode(),
            host=host.encode("ascii"),
            port=port or default,
            target=parsed.raw_path or b"/",
        ),
        host,
        netloc,
    )


class Sender:
    """POSTs events; thread-safe (one connection pool for every sink, keyed by host name).
    `clock` times each request's deadline (the system clock: sockets wait in real time) and
    dates a `Retry-After`; `ssl_context` verifies sinks' certificates (default: httpx's,
    certifi)."""

    def __init__(
        self,
        allow: Sequence[str] = (),
        timeout: float = 10.0,
        clock: Clock = SYSTEM,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.allow = [ipaddress.ip_network(a, strict=False) for a in allow]
        self.timeout = timeout
        self.clock = clock
        self._deadline = Deadline()
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context or httpx.create_ssl_context(trust_env=False),
            max_connections=100,  # httpx's defaults
            max_keepalive_connections=20,
            keepalive_expiry=5.0,
            http1=True,
            http2=False,
            network_backend=Connector(self),
        )

    def resolve(self, host: str, port: int) -> list[IpAddress]:
        try:
            return [ipaddress.ip_address(host)]
        except ValueError:
            pass
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]

    def checked(self, host: str, port: int) -> list[IpAddress]:
        """The addresses of `host` a connection may use (at least one); raises `Stop` with
        the answer when there are none: unresolved (unavailable) or any refused (refused)."""
        try:
            addresses = self.resolve(host, port)
        except OSError as e:
            raise Stop(Answer(Outcome.UNAVAILABLE, error=f"cannot resolve {host}: {e}")) from e
        except ValueError as e:  # UnicodeError: a name the resolver cannot encode
            error = f"invalid sink host {host}: {e}"[:300]
            raise Stop(Answer(Outcome.REFUSED, error=error)) from e
        if not addresses:
            raise Stop(Answer(Outcome.UNAVAILABLE, error=f"cannot resolve {host}: no address"))
        for address in addresses:
            why = refused(address, self.allow)
            if why is not None:
                raise Stop(Answer(Outcome.REFUSED, error=f"sink address refused: {why}"))
        return addresses

    def bound(self, timeout: float | None, expired: type[Exception]) -> float | None:
        """`timeout` cut to what is left of this thread's deadline; raises `expired` past it."""
        at = self._deadline.at
        if at is None:
            return timeout
        left = at - self.clock.monotonic()
        if left <= 0:
            raise expired(f"no answer within {self.timeout:g} s")
        return left if timeout is None else min(timeout, left)

    def post(self, url: str, headers: dict[str, str], body: bytes) -> Answer:
        """POST `body` to `url` within `timeout` seconds in all; never raises."""
        target = _target(url)
        if isinstance(target, Answer):
            return target
        self._deadline.at = self.clock.monotonic() + self.timeout
        try:
            return self._post(target, headers, body)
        except Stop as e:
            return e.answer
        except httpcore.TimeoutException:
            return Answer(Outcome.UNAVAILABLE, error=f"no answer within {self.timeout:g} s")
        except TRANSPORT_ERRORS as e:
            return Answer(Outcome.UNAVAILABLE, error=f"{type(e).__name__}: {e}"[:300])
        finally:
            self._deadline.at = None

    def _post(self, target: _Target, headers: dict[str, str], body: bytes) -> Answer:
        left = self.bound(None, httpcore.PoolTimeout)
        timeouts = dict.fromkeys(("pool", "connect", "read", "write"), left)
        with self._pool.stream(
            "POST",
            target.url,
            headers=[*headers.items(), ("Host", target.netloc)],
            content=body,
            extensions={"timeout": timeouts},
        ) as response:
            status = response.status
            head = _head(response)
            outcome = classify(status)
            error = None
            if outcome is not Outcome.DELIVERED:
                error = f"HTTP {status}"
                if 300 <= status < 400:
                    error += " (redirects are not followed)"
                shown = _shown(head)
                if shown:
                    error += f": {shown}"
            value = next(
                (v.decode("latin-1") for k, v in response.headers if k.lower() == b"retry-after"),
                None,
            )
            return Answer(
                outcome,
                status=status,
                error=error,
                retry_after=retry_after(value, self.clock.now()),
            )

    def close(self) -> None:
        self._pool.close()


def _head(response: httpcore.Response) -> bytes:
    """The first `HEAD_BYTES` of an answer's body (what arrives before the deadline); the
    connection is closed on leaving unless the body was read to its end."""
    head = b""
    try:
        for chunk in response.iter_stream():
            head += chunk[: HEAD_BYTES - len(head)]
            if len(head) >= HEAD_BYTES:
                break
    except (httpcore.TimeoutException, *TRANSPORT_ERRORS):
        pass  # the status is the answer; the body only names an error
    return head


def _shown(head: bytes) -> str:
    """A piece of an answer's body fit for an error message: one line, printable."""
    text = head.decode("utf-8", errors="replace")
    text = "".join(c if c.isprintable() else " " for c in text)
    return " ".join(text.split())[:SHOWN]
