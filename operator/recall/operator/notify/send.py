"""One delivery: an HTTP POST of an event to a sink, and what its answer means.

    sender = Sender(allow=["127.0.0.1"], timeout=10)
    answer = sender.post(url, headers, body)     # never raises; answer.outcome says what to do

Safety (SSRF): the sink's host is resolved here and every address it resolves to is checked;
a loopback, link-local (metadata services live there: 169.254.169.254, fd00:ec2::254),
unspecified, multicast or other metadata address is refused unless `allow` names it. The
request then goes to the checked address itself (the Host header and TLS server name keep the
sink's name, so certificates are verified against it): a DNS answer that changes between the
check and the connection (rebinding) cannot move it. Redirects are never followed: a 3xx is a
refusal. The chart's admission policy refuses such URLs at admission too; this is the check
that holds when DNS says otherwise later.

Outcomes (`classify`, pure): 2xx delivered; 408, 429, 5xx and transport errors mean the sink is
unavailable (the sink backs off as a whole: one probe at a time until it answers); any other
answer is a refusal of this event, given up after a bounded number of tries.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urlsplit, urlunsplit

import httpx

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Metadata services outside the link-local ranges (Alibaba Cloud, Oracle Cloud's v2).
METADATA = (ipaddress.ip_network("100.100.100.200/32"), ipaddress.ip_network("192.0.0.192/32"))


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


def classify(status: int) -> Outcome:
    if 200 <= status < 300:
        return Outcome.DELIVERED
    if status in (408, 429) or status >= 500:
        return Outcome.UNAVAILABLE
    return Outcome.REFUSED


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


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


class Sender:
    """POSTs events; thread-safe (one connection pool for every sink)."""

    def __init__(self, allow: Sequence[str] = (), timeout: float = 10.0) -> None:
        self.allow = [ipaddress.ip_network(a, strict=False) for a in allow]
        self.client = httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False)

    def resolve(self, host: str, port: int) -> list[IpAddress]:
        try:
            return [ipaddress.ip_address(host)]
        except ValueError:
            pass
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]

    def post(self, url: str, headers: dict[str, str], body: bytes) -> Answer:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return Answer(Outcome.REFUSED, error=f"not an http(s) URL: {url}")
        host = parts.hostname
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            addresses = self.resolve(host, port)
        except OSError as e:
            return Answer(Outcome.UNAVAILABLE, error=f"cannot resolve {host}: {e}")
        for address in addresses:
            why = refused(address, self.allow)
            if why is not None:
                return Answer(Outcome.REFUSED, error=f"sink address refused: {why}")
        address = addresses[0]
        literal = f"[{address}]" if address.version == 6 else str(address)
        pinned = urlunsplit(parts._replace(netloc=f"{literal}:{port}"))
        extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
        try:
            response = self.client.post(
                pinned,
                content=body,
                headers={**headers, "Host": parts.netloc.rsplit("@", 1)[-1]},
                extensions=extensions,
            )
        except httpx.HTTPError as e:
            return Answer(Outcome.UNAVAILABLE, error=f"{type(e).__name__}: {e}"[:300])
        outcome = classify(response.status_code)
        error = None
        if outcome is not Outcome.DELIVERED:
            error = f"HTTP {response.status_code}"
            if 300 <= response.status_code < 400:
                error += " (redirects are not followed)"
        return Answer(
            outcome,
            status=response.status_code,
            error=error,
            retry_after=_retry_after(response.headers.get("retry-after")),
        )

    def close(self) -> None:
        self.client.close()
