"""The local node's cluster DNS: a few fixed names, answered on the pod bridge, nothing else.

In-cluster clients find the API server by name as well as by address: kopf's service-account
login dials `https://kubernetes.default.svc`. A real cluster answers that from CoreDNS; the
local node runs this instead, on the pod bridge's host address (UDP 53), as the kubelet's
`clusterDNS`.

    python -m recall_dev.node_dns --listen 10.244.0.1 \
        --record kubernetes.default.svc.cluster.local=10.0.0.1

The node runs no kube-proxy, so a Service's ClusterIP leads nowhere. With `--kubeconfig`, a
Service's name (`<service>.<namespace>.svc.<domain>`) resolves instead to the address of one of
its ready pods, looked up through the API server by the Service's selector (as a headless
Service resolves): pods on the bridge reach each other directly, so the chart's bundled
results store is reachable by its Service name from the worker pods.

Contract:
- An A query for a recorded name gets its address; a Service name (with `--kubeconfig`) the
  address of a ready pod it selects (looked up again after `LOOKUP_SECONDS`), the same one
  while it stays ready; an AAAA query for either gets no answer (NOERROR); any other name under
  the cluster domain gets NXDOMAIN; anything else REFUSED.
- It never recurses and never forwards: no query leaves the machine through it.
- One UDP socket, one thread; it runs until SIGTERM (or its parent dies: PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import argparse
import ipaddress
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TYPE_A = 1
TYPE_AAAA = 28
CLASS_IN = 1
NOERROR, FORMERR, NXDOMAIN, REFUSED = 0, 1, 3, 5
LOOKUP_SECONDS = 2.0


@dataclass(frozen=True)
class Query:
    id: int
    flags: int
    name: str
    qtype: int
    qclass: int
    question: bytes  # the question section as received, echoed in the answer


def parse(packet: bytes) -> Query | None:
    """The first question of a DNS query, or None if the packet is not one we can read."""
    if len(packet) < 12:
        return None
    ident, flags, qdcount = struct.unpack("!HHH", packet[:6])
    if flags & 0x8000 or qdcount < 1:
        return None
    labels: list[str] = []
    i = 12
    while True:
        if i >= len(packet):
            return None
        length = packet[i]
        if length == 0:
            i += 1
            break
        if length & 0xC0 or i + 1 + length > len(packet):
            return None  # no compression in a question we accept
        labels.append(packet[i + 1 : i + 1 + length].decode("ascii", "replace").lower())
        i += 1 + length
    if i + 4 > len(packet):
        return None
    qtype, qclass = struct.unpack("!HH", packet[i : i + 4])
    return Query(ident, flags, ".".join(labels), qtype, qclass, packet[12 : i + 4])


class Services(Mapping[str, str]):
    """Service names → a ready pod's address, from the API server (see the module doc); a
    read-only mapping that `answer` reads like the fixed records."""

    def __init__(
        self, lookup: Callable[[str, str], list[str]], domain: str, fixed: dict[str, str]
    ) -> None:
        self.lookup = lookup  # (namespace, service) -> ready pod IPv4 addresses
        self.domain = domain
        self.fixed = fixed
        self._cache: dict[str, tuple[float, str | None]] = {}

    def _service(self, name: str) -> tuple[str, str] | None:
        suffix = f".svc.{self.domain}"
        if not name.endswith(suffix):
            return None
        parts = name[: -len(suffix)].split(".")
        return (parts[1], parts[0]) if len(parts) == 2 else None

    def get(self, name: str, default: Any = None) -> Any:
        if name in self.fixed:
            return self.fixed[name]
        key = self._service(name)
        if key is None:
            return default
        now = time.monotonic()
        seen = self._cache.get(name)
        if seen is None or now - seen[0] > LOOKUP_SECONDS:
            try:
                ready = self.lookup(*key)
            except Exception:  # the API server is away: keep the last answer
                ready = [seen[1]] if seen and seen[1] else []
            keep = seen[1] if seen and seen[1] in ready else None
            seen = (now, keep or (ready[0] if ready else None))
            self._cache[name] = seen
        return seen[1] if seen[1] is not None else default

    def __getitem__(self, name: str) -> str:
        found = self.get(name)
        if found is None:
            raise KeyError(name)
        return str(found)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __iter__(self) -> Any:
        return iter(self.fixed)

    def __len__(self) -> int:
        return len(self.fixed)


def api_lookup(kubeconfig: Path) -> Callable[[str, str], list[str]]:
    """(namespace, service) → the IPv4 addresses of the ready pods the Service selects."""
    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))

    def lookup(namespace: str, service: str) -> list[str]:
        svc = api.read_namespaced_service(service, namespace, _request_timeout=2)
        selector = svc.spec.selector or {}
        if not selector:
            return []
        labels = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        pods = api.list_namespaced_pod(namespace, label_selector=labels, _request_timeout=2)
        out = []
        for pod in pods.items:
            ready = any(
                c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or [])
            )
            if ready and pod.status.pod_ip and not pod.metadata.deletion_timestamp:
                out.append(pod.status.pod_ip)
        return sorted(out)

    return lookup


def answer(query: Query, records: Mapping[str, str], domain: str) -> bytes:
    """The response to `query` from `records` (name → IPv4 address) under `domain`."""
    rd = query.flags & 0x0100
    name = query.name.rstrip(".")
    answers: list[bytes] = []
    if name in records and query.qclass == CLASS_IN:
        rcode = NOERROR
        if query.qtype == TYPE_A:
            address = ipaddress.IPv4Address(records[name]).packed
            # A pointer to the question's name (offset 12), type A, class IN, TTL 30 s.
            answers.append(struct.pack("!HHHIH", 0xC00C, TYPE_A, CLASS_IN, 30, 4) + address)
    elif name == domain or name.endswith("." + domain):
        rcode = NXDOMAIN
    else:
        rcode = REFUSED
    # QR, AA (authoritative for the cluster domain), RD echoed, RA clear: no recursion here.
    flags = 0x8000 | 0x0400 | rd | rcode
    header = struct.pack("!HHHHHH", query.id, flags, 1, len(answers), 0, 0)
    return header + query.question + b"".join(answers)


def serve(listen: str, port: int, records: Mapping[str, str], domain: str) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((listen, port))
    while True:
        packet, peer = sock.recvfrom(512)
        query = parse(packet)
        if query is None:
            if len(packet) >= 12:
                ident = struct.unpack("!H", packet[:2])[0]
                sock.sendto(struct.pack("!HHHHHH", ident, 0x8000 | FORMERR, 0, 0, 0, 0), peer)
            continue
        sock.sendto(answer(query, records, domain), peer)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recall_dev.node_dns", description=__doc__)
    parser.add_argument("--listen", required=True, help="address to listen on (UDP)")
    parser.add_argument("--port", type=int, default=53)
    parser.add_argument("--domain", default="cluster.local")
    parser.add_argument("--record", action="append", default=[], help="NAME=IPV4, repeatable")
    parser.add_argument(
        "--kubeconfig", type=Path, default=None, help="resolve Services to ready pods through it"
    )
    args = parser.parse_args(argv)
    records: dict[str, str] = {}
    for record in args.record:
        name, _, address = record.partition("=")
        records[name.lower().rstrip(".")] = str(ipaddress.IPv4Address(address))
    domain = args.domain.rstrip(".")
    table: Mapping[str, str] = records
    if args.kubeconfig is not None:
        table = Services(api_lookup(args.kubeconfig), domain, records)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    serve(args.listen, args.port, table, domain)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
