"""The attempt's stages beside the engine: bounded, ordered, stopped at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from recall.media.types import Chunk, Segment
from recall.worker.pipeline import Decoder, Stopwatch, Storer, Transcribed


def chunk(i: int) -> Chunk:
    return Chunk(index=i, start=i * 30.0, duration=30.0, audio=b"x" * 10, first=i, end=i + 1)


class Halt(Exception):
    pass


def polls(n: int) -> tuple[list[int], object]:
    count = [0]

    def poll() -> None:
        count[0] += 1
        if count[0] > n:
            raise Halt()

    return count, poll


def wait_until(cond: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_decoder__runs_ahead_of_the_engine_by_its_depth_at_most() -> None:
    pulled: list[int] = []

    def chunks() -> Iterator[Chunk]:
        for i in range(100):
            pulled.append(i)
            yield chunk(i)

    d = Decoder(chunks(), Stopwatch(), name="decode-t", depth=2)
    d.start()
    time.sleep(0.3)  # nobody takes: two in the queue, one more decoded and waiting for room
    assert len(pulled) == 3
    got = [d.next(lambda: None) for _ in range(5)]
    assert [c.index for c in got if c is not None] == [0, 1, 2, 3, 4]
    d.abort(join=2.0)
    assert not d.thread.is_alive() and len(pulled) <= 8


def test_decoder__hands_over_the_end_and_the_error_of_the_decoding() -> None:
    def broken() -> Iterator[Chunk]:
        yield chunk(0)
        raise ValueError("corrupt frame")

    d = Decoder(broken(), Stopwatch(), name="decode-t")
    d.start()
    assert d.next(lambda: None) is not None
    with pytest.raises(ValueError, match="corrupt frame"):
        d.next(lambda: None)
    e = Decoder(iter([chunk(0)]), Stopwatch(), name="decode-e")
    e.start()
    assert e.next(lambda: None) is not None and e.next(lambda: None) is None


def test_decoder__a_lost_lease_stops_the_wait() -> None:
    gate = threading.Event()

    def slow() -> Iterator[Chunk]:
        gate.wait(5)
        yield chunk(0)

    d = Decoder(slow(), Stopwatch(), name="decode-t")
    d.start()
    _, poll = polls(3)
    with pytest.raises(Halt):
        d.next(poll)  # type: ignore[arg-type]
    gate.set()
    d.abort(join=2.0)


def test_storer__keeps_order_and_reports_each_chunk_once_durable() -> None:
    stored: list[int] = []
    durable: list[int] = []

    def store(item: Transcribed) -> None:
        assert item.chunk.audio is None  # the audio is not kept behind the engine
        time.sleep(0.002)
        stored.append(item.chunk.index)

    s = Storer(store, lambda item: durable.append(item.chunk.index), name="store-t", depth=3)
    s.start()
    for i in range(20):
        s.put(chunk(i), [Segment(start=0, end=1, text=f"w{i}")], lambda: None)
    s.drain(lambda: None)
    assert stored == durable == list(range(20))


def test_storer__a_slow_store_blocks_the_engine_after_depth_chunks() -> None:
    release = threading.Event()
    taken: list[int] = []

    def store(item: Transcribed) -> None:
        taken.append(item.chunk.index)
        release.wait(10)

    s = Storer(store, lambda item: None, name="store-t", depth=2)
    s.start()
    for i in range(3):  # one in the store, two waiting
        s.put(chunk(i), [], lambda: None)
    wait_until(lambda: taken == [0])
    count, poll = polls(20)
    with pytest.raises(Halt):
        s.put(chunk(3), [], poll)  # type: ignore[arg-type]
    assert count[0] > 20 and s.queue.qsize() == 2  # it waited; nothing beyond the bound
    release.set()
    s.put(chunk(3), [], lambda: None)
    s.drain(lambda: None)
    assert taken == [0, 1, 2, 3]


def test_storer__its_error_is_raised_at_the_next_hand_over() -> None:
    def store(item: Transcribed) -> None:
        if item.chunk.index == 1:
            raise RuntimeError("access denied")

    s = Storer(store, lambda item: None, name="store-t")
    s.start()
    s.put(chunk(0), [], lambda: None)
    s.put(chunk(1), [], lambda: None)
    wait_until(lambda: s.error is not None)
    with pytest.raises(RuntimeError, match="access denied"):
        s.put(chunk(2), [], lambda: None)


def test_storer__abort_writes_nothing_more() -> None:
    started = threading.Event()
    stored: list[int] = []

    def store(item: Transcribed) -> None:
        started.set()
        time.sleep(0.2)
        stored.append(item.chunk.index)

    reported: list[int] = []
    s = Storer(store, lambda item: reported.append(item.chunk.index), name="store-t", depth=4)
    s.start()
    for i in range(4):
        s.put(chunk(i), [], lambda: None)
    started.wait(2)
    s.abort(join=2.0)
    assert not s.thread.is_alive()
    assert stored == [0] and reported == []  # the put in flight ends; nothing after it


def test_stopwatch__counts_the_engine_calls_and_times_every_part() -> None:
    watch = Stopwatch()
    for _ in range(3):
        watch.timed("engine", lambda: None)
    watch.timed("store", lambda: None)
    watch.add("media", 0.25)
    fields = watch.fields()
    assert fields["engine_calls"] == 3, "one a call, whatever the chunks in it"
    assert fields["media_seconds"] == 0.25
    assert set(fields) == {f"{p}_seconds" for p in Stopwatch.PARTS} | {"engine_calls"}
