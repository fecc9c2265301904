"""The worker's view of the queue: Queued jobs kept current by a list + watch, no polling.

A background thread lists the jobs the API server selects with `status.phase=Queued` and
without the `recall.dev/suspended` label, then watches that selection; objects that leave it
arrive as DELETED events. `wait()` blocks until something is claimable or a timeout passes;
`pick()` chooses by priority then age, at random among the first `window` candidates, so that
many workers do not all race for the head of the queue.

Not guaranteed: the view may lag the API server by one event; a claim is decided by the
fenced write, never by this view.
"""

from __future__ import annotations

import datetime as dt
import random
import threading
from collections.abc import Callable

from kubernetes.client.exceptions import ApiException

from recall import log
from recall.kube import Kube
from recall.models import LABEL_SUSPENDED, TranscriptionJob

FIELD_SELECTOR = "status.phase=Queued"
LABEL_SELECTOR = f"!{LABEL_SUSPENDED}"

_log = log.get("queue")


def order_key(job: TranscriptionJob) -> tuple[int, dt.datetime, str]:
    """Higher priority first, then older first, then by name for a stable order."""
    created = job.metadata.creation_timestamp or dt.datetime.max.replace(tzinfo=dt.UTC)
    return (-job.spec.priority, created, job.name)


def claimable(job: TranscriptionJob, now: dt.datetime, engine: str) -> bool:
    """Could this worker claim `job` now, by what it can see locally?

    A job that names no engine goes to any real engine; the simulated engine takes only jobs
    that ask for it, so a test worker never "transcribes" real media with made-up text.
    """
    wanted = job.spec.engine.name if job.spec.engine else None
    if wanted != engine and (wanted is not None or engine == "simulated"):
        return False
    if job.suspended:
        return False
    nb = job.status.not_before
    return nb is None or nb <= now


def choose(
    candidates: list[TranscriptionJob],
    now: dt.datetime,
    engine: str,
    window: int,
    rng: random.Random,
) -> TranscriptionJob | None:
    """The pure part of `pick`: order, filter and choose among the head of the queue."""
    ready = sorted((j for j in candidates if claimable(j, now, engine)), key=order_key)
    if not ready:
        return None
    return rng.choice(ready[:window])


class JobQueue:
    def __init__(
        self,
        kube: Kube,
        namespace: str | None,
        engine: str,
        *,
        window: int = 4,
        relist_seconds: float = 60.0,
        rng: random.Random | None = None,
        now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.engine = engine
        self.window = window
        self.relist_seconds = relist_seconds
        self.rng = rng or random.Random()
        self.now = now
        self._jobs: dict[tuple[str, str], TranscriptionJob] = {}
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="queue-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()

    def pick(self) -> TranscriptionJob | None:
        with self._cond:
            candidates = list(self._jobs.values())
        return choose(candidates, self.now(), self.engine, self.window, self.rng)

    def discard(self, job: TranscriptionJob) -> None:
        """Forget `job` until the watch brings it back (it was claimed by someone)."""
        with self._cond:
            current = self._jobs.get((job.namespace, job.name))
            if (
                current is not None
                and current.metadata.resource_version == job.metadata.resource_version
            ):
                del self._jobs[(job.namespace, job.name)]

    def wait(self, timeout: float) -> None:
        """Block until the queue changes, the earliest backoff passes, `timeout`, or stop."""
        with self._cond:
            now = self.now()
            waits = [timeout]
            for j in self._jobs.values():
                if j.status.not_before and j.status.not_before > now:
                    waits.append((j.status.not_before - now).total_seconds() + 0.01)
            if self._stop.is_set():
                return
            self._cond.wait(max(0.0, min(waits)))

    # -- the list + watch thread ------------------------------------------------------------

    def _run(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                rv = self._relist()
                backoff = 0.5
                self._watch(rv)
            except ApiException as e:
                if e.status != 410:  # 410: our resourceVersion is too old; re-list at once
                    _log.warning("queue_watch_error", status=e.status, reason=e.reason)
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, 10.0)
            except Exception as e:  # the API server may be unreachable for a while
                _log.warning("queue_watch_error", error=str(e))
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)

    def _relist(self) -> str:
        jobs, rv = self.kube.list_jobs(
            self.namespace, field_selector=FIELD_SELECTOR, label_selector=LABEL_SELECTOR
        )
        with self._cond:
            self._jobs = {(j.namespace, j.name): j for j in jobs}
            self._cond.notify_all()
        return rv

    def _watch(self, rv: str) -> None:
        timeout = max(1, int(self.relist_seconds))
        for kind, obj in self.kube.watch_jobs(
            self.namespace,
            rv,
            field_selector=FIELD_SELECTOR,
            label_selector=LABEL_SELECTOR,
            timeout_seconds=timeout,
        ):
            if self._stop.is_set():
                return
            if kind == "BOOKMARK":
                continue
            if kind == "ERROR":
                code = obj.get("code") if isinstance(obj, dict) else None
                raise ApiException(status=code or 500, reason=str(obj))
            job = TranscriptionJob.from_api(obj)
            key = (job.namespace, job.name)
            with self._cond:
                if kind == "DELETED":
                    self._jobs.pop(key, None)
                else:
                    self._jobs[key] = job
                self._cond.notify_all()
