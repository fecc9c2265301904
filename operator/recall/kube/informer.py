"""An informer: a selection of objects (TranscriptionJobs, Leases) kept current by list + watch.

`Informer.run(stop)` lists the selection page by page, hands it to the consumer, then watches
from the list's resourceVersion and hands over every change. A watch that ends or breaks (the
server's timeout, a reset connection, a read timeout, a restarted API server) is started again
from the last resourceVersion it saw, bookmarks included, as client-go's reflector does: no
event is handed over twice and the view never slides back. It lists again on a 410, after
`relist_seconds` at the latest (checked whenever a watch ends or fails), and after a failed
list. After an error it waits with jittered backoff up to one second (`BACKOFF`: the view must
come back within a tick or two of a restarted API server answering) and no sooner than a 429's
Retry-After; a watch that ends within `SHORT_WATCH` seconds without an event is waited on the
same backoff (client-go's "very short watch"), so a server that closes every watch at once is
not asked again in a tight loop. Every wait is on its `Clock`. It never raises: transient API
errors delay the view, never end it (DESIGN §5, 9).

A connection that dies silently is noticed within the watch's read timeout
(`recall.kube.http.WATCH_READ_SECONDS`, 90 s) or sooner by TCP keepalive; the view may be that
stale before `current()` turns False.

Not guaranteed: the view may lag the API server by one event; decisions that matter are made
by fenced writes, never by this view. `current()` says whether the view can be trusted at all
(a consumer acting on what is missing from it, such as an autoscaler, holds while it is not).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from recall.base import log
from recall.base.backoff import Backoff
from recall.base.clock import SYSTEM, Clock
from recall.kube import (
    EVERYTHING,
    ApiError,
    Conflict,
    JobApi,
    Page,
    RawObject,
    Selector,
    WatchEvent,
    retry_pause,
)
from recall.kube.verbs import JOBS, LEASES, Resource

_log = log.get("informer")
PAGE_SIZE = 500
BACKOFF = Backoff(initial=0.1, cap=0.5, jitter=1.0)
SHORT_WATCH = 1.0  # seconds: a watch this short without an event is a server turning us away


class Consumer(Protocol):
    def relisted(self, items: Iterator[RawObject]) -> None:
        """The whole selection, streamed; what is not in it is gone."""

    def changed(self, type_: str, obj: RawObject) -> None:
        """ADDED, MODIFIED or DELETED (also sent when an object leaves the selection)."""


class Source(Protocol):
    """What an informer lists and watches."""

    def list(self, limit: int, continue_from: str | None) -> Page: ...

    def watch(self, resource_version: str) -> Iterator[WatchEvent]: ...


@dataclass(frozen=True)
class Selection:
    """The objects of `resource` in a namespace (or all) that `selector` selects."""

    api: JobApi
    resource: Resource
    namespace: str | None
    selector: Selector = EVERYTHING

    def list(self, limit: int, continue_from: str | None) -> Page:
        return self.api.verbs.list(
            self.resource, self.namespace, self.selector, limit=limit, continue_from=continue_from
        )

    def watch(self, resource_version: str) -> Iterator[WatchEvent]:
        return self.api.verbs.watch(self.resource, self.namespace, resource_version, self.selector)

    @classmethod
    def jobs(cls, api: JobApi, namespace: str | None, selector: Selector = EVERYTHING) -> Selection:
        """TranscriptionJobs of a namespace (or all), as a selector selects them."""
        return cls(api, JOBS, namespace, selector)

    @classmethod
    def leases(cls, api: JobApi, namespace: str | None, labels: str) -> Selection:
        """coordination.k8s.io Leases of a namespace (or all) with the given labels."""
        return cls(api, LEASES, namespace, Selector(labels=labels))


class Informer:
    def __init__(
        self,
        source: Source,
        consumer: Consumer,
        *,
        name: str = "informer",
        relist_seconds: float = 300.0,
        clock: Clock = SYSTEM,
    ) -> None:
        self.source = source
        self.consumer = consumer
        self.name = name
        self.relist_seconds = relist_seconds
        self.clock = clock
        self.synced = threading.Event()
        self._failed = False  # an error since the last successful list or event
        self._rv: str | None = None  # the last resourceVersion seen; None: list first
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def current(self) -> bool:
        """Listed, and no list or watch failed since the last success."""
        return self.synced.is_set() and not self._failed

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self, stop: threading.Event | None = None) -> None:
        """List and watch until `stop` (or `self.stop()`); never raises."""
        stop = stop or self._stop
        retries = 0  # errors (and empty short watches) since the last successful watch
        listed = 0.0
        while not stop.is_set() and not self._stop.is_set():
            try:
                if self._rv is not None and self.clock.monotonic() - listed > self.relist_seconds:
                    self._rv = None
                if self._rv is None:
                    self._rv = self._relist()
                    self.synced.set()
                    listed = self.clock.monotonic()
                started = self.clock.monotonic()
                if self._watch(stop) or self.clock.monotonic() - started >= SHORT_WATCH:
                    retries = 0
                else:
                    self.clock.wait(stop, BACKOFF.delay(retries))
                    retries += 1
            except Conflict as e:
                self._rv = None  # 410: the resourceVersion is too old; list again at once
                self._failed = True
                if e.status != 410:
                    _log.warning("informer_error", informer=self.name, error=e.message[:200])
                    self.clock.wait(stop, 2 * BACKOFF.base(retries))
            except Exception as e:  # the API server may be unreachable for a while
                self._failed = True
                _log.warning("informer_error", informer=self.name, error=str(e)[:200])
                pause = BACKOFF.delay(retries)
                if isinstance(e, ApiError):  # a 429: no sooner than its Retry-After
                    pause = retry_pause(e, pause)
                self.clock.wait(stop, pause)
                retries += 1

    def _pages(self, first: list[RawObject], next_page: str | None) -> Iterator[RawObject]:
        yield from first
        while next_page:
            page = self.source.list(PAGE_SIZE, next_page)
            next_page = page.next
            yield from page.items

    def _relist(self) -> str:
        page = self.source.list(PAGE_SIZE, None)
        self.consumer.relisted(self._pages(page.items, page.next))
        self._failed = False
        return page.resource_version

    def _watch(self, stop: threading.Event) -> int:
        """Watch from the last version seen until the watch ends; returns the events seen. The
        last version is kept as each event arrives, so a watch that breaks keeps it too."""
        seen = 0
        for event in self.source.watch(self._rv or ""):
            if stop.is_set() or self._stop.is_set():
                break
            seen += 1
            self._rv = str(event.object.get("metadata", {}).get("resourceVersion") or self._rv)
            self._failed = False  # the watch answers again
            if event.type != "BOOKMARK":
                self.consumer.changed(event.type, event.object)
        return seen
