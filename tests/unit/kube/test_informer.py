"""The informer's retries against a source that answers like kube-apiserver: a starting server's
503 with Retry-After 5 (it serves within a second) is retried on the informer's own short
backoff; a 429's Retry-After is waited out."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

from recall.kube import Page, Unavailable, WatchEvent
from recall.kube.informer import Informer


class Starting:
    """A source whose first watch fails with `error`, then serves one ADDED event and holds
    the watch open until the test ends."""

    def __init__(self, error: Unavailable) -> None:
        self.error = error
        self.watches: list[float] = []
        self.delivered = threading.Event()
        self.done = threading.Event()

    def list(self, limit: int, continue_from: str | None) -> Page:
        return Page(items=[], resource_version="1")

    def watch(self, resource_version: str) -> Iterator[WatchEvent]:
        self.watches.append(time.monotonic())
        if len(self.watches) == 1:
            raise self.error
        yield WatchEvent("ADDED", {"metadata": {"name": "after", "resourceVersion": "2"}})
        self.done.wait(10)


class Names:
    def __init__(self, source: Starting) -> None:
        self.source = source
        self.names: list[str] = []

    def relisted(self, items: Iterator[dict[str, object]]) -> None:
        list(items)

    def changed(self, type_: str, obj: dict[str, object]) -> None:
        meta = obj["metadata"]
        assert isinstance(meta, dict)
        self.names.append(str(meta["name"]))
        self.source.delivered.set()


def retried_after(error: Unavailable) -> float:
    """Seconds between the failed watch and the next one."""
    source = Starting(error)
    names = Names(source)
    informer = Informer(source, names, name="test")
    informer.start()
    try:
        assert source.delivered.wait(15), "the informer never watched again"
    finally:
        source.done.set()
        informer.stop()
    assert names.names == ["after"]
    return source.watches[1] - source.watches[0]


def test_starting_server__its_503_retry_after_is_not_waited_out() -> None:
    # the informer's own backoff is at most 1 s (informer.BACKOFF); 5 s would leave its view stale
    starting = Unavailable("watch jobs: not all paths installed", status=503, retry_after=5.0)
    assert retried_after(starting) < 3.0


def test_throttled__a_429_retry_after_is_waited_out() -> None:
    throttled = Unavailable("watch jobs: too many requests", status=429, retry_after=1.0)
    assert retried_after(throttled) >= 1.0
