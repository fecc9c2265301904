"""Where the informer watches again: from the last resourceVersion it saw (bookmarks too), not
from its list's; and a watch the server ends at once with nothing is asked again only after a
backoff on the informer's clock."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from recall.kube import Page, RawObject, Unavailable, WatchEvent
from recall.kube.informer import Informer
from recall_dev.twin.clock import FakeClock
from tests.helpers import wait_for


def event(type_: str, rv: int) -> WatchEvent:
    return WatchEvent(type_, {"metadata": {"name": f"j{rv}", "resourceVersion": str(rv)}})


class Breaking:
    """Lists at rv 100; the first watch hands over 101-105 and a bookmark at 106, then its
    connection breaks; the next watch waits until the test ends."""

    def __init__(self) -> None:
        self.watched_from: list[str] = []
        self.again = threading.Event()
        self.done = threading.Event()

    def list(self, limit: int, continue_from: str | None) -> Page:
        return Page(items=[], resource_version="100")

    def watch(self, resource_version: str) -> Iterator[WatchEvent]:
        self.watched_from.append(resource_version)
        if len(self.watched_from) > 1:
            self.again.set()
            self.done.wait(10)
            return
        for rv in range(101, 106):
            yield event("MODIFIED", rv)
        yield event("BOOKMARK", 106)
        raise Unavailable("watch jobs: ProtocolError: Connection reset by peer")


class Changes:
    def __init__(self) -> None:
        self.versions: list[str] = []

    def relisted(self, items: Iterator[RawObject]) -> None:
        list(items)

    def changed(self, type_: str, obj: RawObject) -> None:
        self.versions.append(str(obj["metadata"]["resourceVersion"]))


def test_broken_watch__watches_again_from_the_last_version_seen() -> None:
    source, changes = Breaking(), Changes()
    informer = Informer(source, changes, name="test")
    informer.start()
    try:
        assert source.again.wait(10), "the informer never watched again"
    finally:
        source.done.set()
        informer.stop()
    assert source.watched_from == ["100", "106"]  # the bookmark's version, not the list's
    assert changes.versions == ["101", "102", "103", "104", "105"]  # none handed over twice


class Empty:
    """A server that ends every watch at once, with nothing."""

    def __init__(self) -> None:
        self.watches = 0

    def list(self, limit: int, continue_from: str | None) -> Page:
        return Page(items=[], resource_version="1")

    def watch(self, resource_version: str) -> Iterator[WatchEvent]:
        self.watches += 1
        return iter(())


def test_watch_ended_at_once_empty__asked_again_only_after_a_backoff() -> None:
    source, clock = Empty(), FakeClock()
    informer = Informer(source, Changes(), name="test", clock=clock)
    informer.start()
    try:
        wait_for(clock.waiters, timeout=10, interval=0.001, message="the informer backing off")
        assert source.watches == 1
        clock.step(1.0)  # the longest first backoff (0.1 s stretched by its jitter) is over
        wait_for(lambda: source.watches == 2 and clock.waiters(), timeout=10, interval=0.001)
        assert source.watches == 2
    finally:
        informer.stop()
