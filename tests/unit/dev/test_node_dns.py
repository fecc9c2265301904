"""The local node's DNS: cluster names answered, other cluster names NXDOMAIN, the rest refused."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from recall_dev.node_dns import NOERROR, NXDOMAIN, REFUSED, TYPE_A, TYPE_AAAA, answer, parse, serve

RECORDS = {"kubernetes.default.svc.cluster.local": "10.0.0.1"}


def query(name: str, qtype: int = TYPE_A, ident: int = 0x1234) -> bytes:
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.split("."))
    return (
        struct.pack("!HHHHHH", ident, 0x0100, 1, 0, 0, 0)
        + labels
        + b"\0"
        + struct.pack("!HH", qtype, 1)
    )


def rcode_and_answers(packet: bytes) -> tuple[int, int]:
    _, flags, _, ancount, _, _ = struct.unpack("!HHHHHH", packet[:12])
    return flags & 0xF, ancount


def test_answer__a_record_of_a_known_name() -> None:
    q = parse(query("Kubernetes.Default.svc.cluster.local"))
    assert q is not None
    reply = answer(q, RECORDS, "cluster.local")
    assert rcode_and_answers(reply) == (NOERROR, 1)
    assert reply.endswith(bytes([10, 0, 0, 1]))
    assert reply[:2] == b"\x12\x34"


def test_answer__aaaa_of_a_known_name_is_empty() -> None:
    q = parse(query("kubernetes.default.svc.cluster.local", TYPE_AAAA))
    assert q is not None
    assert rcode_and_answers(answer(q, RECORDS, "cluster.local")) == (NOERROR, 0)


@pytest.mark.parametrize(
    ("name", "rcode"),
    [("kubernetes.default.svc.recall.svc.cluster.local", NXDOMAIN), ("example.org", REFUSED)],
)
def test_answer__unknown_names_are_never_resolved(name: str, rcode: int) -> None:
    q = parse(query(name))
    assert q is not None
    assert rcode_and_answers(answer(q, RECORDS, "cluster.local")) == (rcode, 0)


def test_parse__rejects_responses_and_garbage() -> None:
    assert parse(b"\0" * 5) is None
    response = bytearray(query("a.b"))
    response[2] |= 0x80
    assert parse(bytes(response)) is None


def test_serve__answers_over_udp_on_loopback() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    thread = threading.Thread(
        target=serve, args=("127.0.0.1", port, RECORDS, "cluster.local"), daemon=True
    )
    thread.start()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
        client.settimeout(0.2)
        for _ in range(50):
            client.sendto(query("kubernetes.default.svc.cluster.local"), ("127.0.0.1", port))
            try:
                reply, _ = client.recvfrom(512)
                break
            except (TimeoutError, ConnectionRefusedError):
                continue
        assert rcode_and_answers(reply) == (NOERROR, 1)


def test_services__a_service_name_resolves_to_a_ready_pod_and_sticks_to_it() -> None:
    from recall_dev.node_dns import Services

    ready = {"store": ["10.244.0.7", "10.244.0.9"]}
    calls: list[tuple[str, str]] = []

    def lookup(namespace: str, service: str) -> list[str]:
        calls.append((namespace, service))
        return ready.get(service, [])

    fixed = {"kubernetes.default.svc.cluster.local": "10.0.0.1"}
    table = Services(lookup, "cluster.local", fixed)
    assert table["kubernetes.default.svc.cluster.local"] == "10.0.0.1"
    assert table["store.recall.svc.cluster.local"] == "10.244.0.7"
    assert "gone.recall.svc.cluster.local" not in table
    assert "store.recall.svc.recall.svc.cluster.local" not in table  # a search-path try
    assert calls == [("recall", "store"), ("recall", "gone")]


def test_services__an_answer_to_a_query_for_a_service() -> None:
    from recall_dev.node_dns import Services

    table = Services(lambda ns, svc: ["10.244.0.5"], "cluster.local", {})
    packet = (
        bytes.fromhex("abcd01000001000000000000")
        + b"".join(
            bytes([len(p)]) + p.encode() for p in ["store", "recall", "svc", "cluster", "local"]
        )
        + b"\x00\x00\x01\x00\x01"
    )
    query = parse(packet)
    assert query is not None
    reply = answer(query, table, "cluster.local")
    assert reply.endswith(bytes([10, 244, 0, 5]))
