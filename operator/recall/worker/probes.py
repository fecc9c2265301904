"""The worker's probes: after the model cache or the results store refused for good, claim
nothing until it works again (a slot claims only if `broken is None or probe()`).

`CacheProbe` (thread-safe) repeats what failed (`failed(error, retry)`), one slot at a time, on a
backoff (a probe may fetch a model: a download). A refusal for another reason than the cache
(the model missing) is not the cache's: the probe passes and the next job meets it as its own.
`StoreProbe` does the same for the results store (`STORE_REFUSALS`): a probe write to
`PROBE_KEY`, at most every `seconds`. `DevicePause`, after the device failed a model's load
(`DeviceFailed`: out of memory), claims nothing for a backoff that doubles while loads keep
failing and starts over once a job is worked without it: the next job's load is the probe.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from recall.base.backoff import Backoff
from recall.base.clock import Clock
from recall.bucket import Bucket
from recall.bucket import StoreError as BucketError
from recall.engines.device import DeviceFailed
from recall.engines.models import ModelCacheUnwritable, probe_cache
from recall.resources.errors import JobFailure

# Refusals of the results store that no job of this worker can get past.
STORE_REFUSALS = ("StorageAccessDenied", "StorageBucketMissing", "StorageUrlInvalid")
PROBE_KEY = "scratch/.probe"


class CacheProbe:
    def __init__(self, backoff: Backoff, clock: Clock, log: Any) -> None:
        self.backoff = backoff
        self.clock = clock
        self.log = log
        self.broken: ModelCacheUnwritable | None = None  # until a probe of the cache works
        self._retry: Callable[[], object] = lambda: None  # repeats what failed on it
        self._probes = 0  # probes of a broken model cache so far
        self._next = 0.0
        self._lock = threading.Lock()

    def failed(self, error: ModelCacheUnwritable, retry: Callable[[], object] | None) -> None:
        """The cache refused `retry`, which the probe repeats (None: a file made in the cache)."""
        with self._lock:
            self._retry = retry or (lambda: probe_cache(error.directory))
            self._probes = 0
            self._next = self.clock.monotonic() + self.backoff.delay(0)
            self.broken = error

    def probe(self) -> bool:
        """True once what failed works again (the probe repeats it: a file in the cache is not
        enough, a full volume or a lock file of another UID let one be made)."""
        with self._lock:
            broken, retry = self.broken, self._retry
            now = self.clock.monotonic()
            if broken is None:
                return True
            if now < self._next:
                return False
            self._probes += 1
            pause = self.backoff.delay(self._probes)
            self._next = now + pause  # one slot probes at a time
        try:
            probe_cache(broken.directory)
            retry()
        except ModelCacheUnwritable as e:
            self.log.warning(
                "model_cache_still_unwritable",
                message=e.message[:300],
                next_probe_seconds=round(pause),
            )
            return False
        except JobFailure as e:
            self.log.info("model_cache_probe_refused_otherwise", reason=e.reason)
        self.log.info("model_cache_writable_again", directory=str(broken.directory))
        with self._lock:
            if self.broken is broken:
                self.broken = None
        return True


class StoreProbe:
    """The results store's probe: `broken` says why the store refused, until a probe works."""

    def __init__(
        self, results: Bucket, body: bytes, seconds: float, clock: Clock, log: Any
    ) -> None:
        self.results = results
        self.body = body  # what the probe writes (the worker's id)
        self.seconds = seconds
        self.clock = clock
        self.log = log
        self.broken: str | None = None  # why the results store refused, until a probe works
        self._next = 0.0

    def failed(self, reason: str) -> None:
        """A job failed with `reason`, one of `STORE_REFUSALS`: probe first after `seconds`."""
        self.broken = reason
        self._next = self.clock.monotonic() + self.seconds

    def probe(self) -> bool:
        """After a refusal of the results store: True once a probe write succeeds again."""
        now = self.clock.monotonic()
        if now < self._next:
            return False
        self._next = now + self.seconds
        try:
            self.results.put(PROBE_KEY, self.body, once=False)
        except BucketError as e:
            self.log.warning("store_still_refused", reason=e.reason, error=e.message[:300])
            return False
        self.log.info("store_usable_again", after=self.broken)
        self.broken = None
        return True


class DevicePause:
    """The pause after a `DeviceFailed` (thread-safe): `broken` is the latest failure while
    the pause lasts (the registration says `failed` meanwhile: no offer comes)."""

    def __init__(self, backoff: Backoff, clock: Clock) -> None:
        self.backoff = backoff
        self.clock = clock
        self._failed: DeviceFailed | None = None
        self._failures = 0  # failed loads since the last job worked without one
        self._until = 0.0
        self._lock = threading.Lock()

    @property
    def broken(self) -> DeviceFailed | None:
        with self._lock:
            return self._failed if self.clock.monotonic() < self._until else None

    def failed(self, error: DeviceFailed) -> float:
        """The device failed a load: pause claims; returns the pause in seconds."""
        with self._lock:
            pause = self.backoff.delay(self._failures)
            self._failures += 1
            self._failed = error
            self._until = self.clock.monotonic() + pause
            return pause

    def worked(self) -> None:
        """A job was worked without a device failure: the next one pauses the least again."""
        with self._lock:
            self._failures = 0
