"""The local node's cluster DNS: a few fixed names, answered on the pod bridge, nothing else.

In-cluster clients find the API server by name as well as by address: kopf's service-account
login dials `https://kubernetes.default.svc`. A real cluster answers that from CoreDNS; the
local node runs this instead, on the pod bridge's host address (UDP 53), as the kubelet's
`clusterDNS`.

    python -m recall_dev.node_dns --listen 10.244.0.1 \
        --record kubernetes.default.svc.cluster.local=10.0.0.1

Contract:
- An A query for a recorded name gets its address; an AAAA query for it gets no answer
  (NOERROR); any other name under the cluster domain gets NXDOMAIN; anything else REFUSED.
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
from dataclasses import dataclass

TYPE_A = 1
TYPE_AAAA = 28
CLASS_IN = 1
NOERROR, FORMERR, NXDOMAIN, REFUSED = 0, 1, 3, 5


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


def answer(query: Query, records: dict[str, str], domain: str) -> bytes:
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


def serve(listen: str, port: int, records: dict[str, str], domain: str) -> None:
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
    args = parser.parse_args(argv)
    records = {}
    for record in args.record:
        name, _, address = record.partition("=")
        records[name.lower().rstrip(".")] = str(ipaddress.IPv4Address(address))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    serve(args.listen, args.port, records, args.domain.rstrip("."))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
