"""The worker's health endpoint: liveness by the age of the last beat, readiness, HTTP answers."""

from __future__ import annotations

import http.client
from collections.abc import Iterator

import pytest

from recall.health import Liveness, serve


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_liveness__alive_until_max_silence_after_creation(clock: FakeClock) -> None:
    liveness = Liveness(max_silence=10, clock=clock)
    clock.now += 9.9
    assert liveness.alive()
    clock.now += 0.1
    assert not liveness.alive()


def test_liveness__beat_restarts_the_silence(clock: FakeClock) -> None:
    liveness = Liveness(max_silence=10, clock=clock)
    clock.now += 9
    liveness.beat()
    clock.now += 9
    assert liveness.alive()
    assert liveness.silence() == pytest.approx(9)
    clock.now += 2
    assert not liveness.alive()


def test_readiness__needs_a_first_beat_and_ends_when_stopping(clock: FakeClock) -> None:
    liveness = Liveness(max_silence=10, clock=clock)
    assert not liveness.ready()
    liveness.beat()
    assert liveness.ready()
    liveness.stopping()
    assert not liveness.ready()
    assert liveness.alive(), "a stopping worker is still alive: it releases its job"


def test_readiness__lost_with_liveness(clock: FakeClock) -> None:
    liveness = Liveness(max_silence=10, clock=clock)
    liveness.beat()
    clock.now += 11
    assert not liveness.ready()


def test_liveness__rejects_a_non_positive_max_silence() -> None:
    with pytest.raises(ValueError, match="positive"):
        Liveness(max_silence=0)


@pytest.fixture
def served(clock: FakeClock) -> Iterator[tuple[Liveness, int]]:
    liveness = Liveness(max_silence=10, clock=clock)
    server = serve(liveness, port=0, host="127.0.0.1")
    try:
        yield liveness, server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


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
    clock.now += 30
    status, body = get(port, "/healthz")
    assert status == 503 and "30.0 s" in body


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
