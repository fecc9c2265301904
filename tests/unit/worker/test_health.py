"""The worker's health endpoint: liveness by the age of the last beat, readiness, HTTP answers."""

from __future__ import annotations

import http.client
import socket
from collections.abc import Iterator

import pytest

from recall.worker.health import Liveness
from recall_dev.twin.clock import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_liveness__healthy_until_stale_after_since_creation(clock: FakeClock) -> None:
    liveness = Liveness(stale_after=10, clock=clock)
    clock.step(9.9)
    assert liveness.healthy()
    clock.step(0.1)
    assert not liveness.healthy()


def test_liveness__beat_restarts_the_silence(clock: FakeClock) -> None:
    liveness = Liveness(stale_after=10, clock=clock)
    clock.step(9)
    liveness.beat()
    clock.step(9)
    assert liveness.healthy()
    assert liveness.age() == pytest.approx(9)
    clock.step(2)
    assert not liveness.healthy()


def test_readiness__needs_a_first_beat_and_ends_when_stopping(clock: FakeClock) -> None:
    liveness = Liveness(stale_after=10, clock=clock)
    assert not liveness.ready()
    liveness.beat()
    assert liveness.ready()
    liveness.stopping()
    assert not liveness.ready()
    assert liveness.healthy(), "a stopping worker is still alive: it releases its job"


def test_serve__port_0_is_off() -> None:
    liveness = Liveness()
    liveness.serve(0)
    assert liveness.server is None


def test_readiness__lost_with_liveness(clock: FakeClock) -> None:
    liveness = Liveness(stale_after=10, clock=clock)
    liveness.beat()
    clock.step(11)
    assert not liveness.ready()


def test_liveness__rejects_a_non_positive_stale_after() -> None:
    with pytest.raises(ValueError, match="positive"):
        Liveness(stale_after=0)


@pytest.fixture
def served(clock: FakeClock) -> Iterator[tuple[Liveness, int]]:
    liveness = Liveness(stale_after=10, clock=clock)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    liveness.serve(port, addr="127.0.0.1")
    assert liveness.server is not None
    try:
        yield liveness, port
    finally:
        liveness.server.shutdown()
        liveness.server.server_close()


def get(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def test_http__healthz_200_while_beating_then_503(
    served: tuple[Liveness, int], clock: FakeClock
) -> None:
    liveness, port = served
    liveness.beat()
    status, body = get(port, "/healthz")
    assert status == 200 and body.startswith("ok")
    clock.step(30)
    status, body = get(port, "/livez")
    assert status == 503 and body.startswith("stale 30.0s")


def test_http__readyz_follows_readiness(served: tuple[Liveness, int]) -> None:
    liveness, port = served
    assert get(port, "/readyz")[0] == 503
    liveness.beat()
    assert get(port, "/readyz")[0] == 200
    liveness.stopping()
    assert get(port, "/readyz")[0] == 503
    assert get(port, "/healthz")[0] == 200


def test_http__unknown_path_is_404(served: tuple[Liveness, int]) -> None:
    _, port = served
    assert get(port, "/metrics")[0] == 404
