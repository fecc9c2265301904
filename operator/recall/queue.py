"""The worker's view of the queue: the claimable jobs, kept current by an `Informer`.

The informer lists and watches the jobs the API server selects with `status.phase=Queued` and
without the `recall.dev/suspended` label; jobs that leave the selection arrive as DELETED.
`wait()` blocks until something changes or a timeout passes; `pick()` chooses by priority
then age, at random among the first `window` candidates, so that many workers do not all race
for the head of the queue (`choose` is the pure part).

Not guaranteed: the view may lag the API server by one event; a claim is decided by the fenced
write, never by this view.
"""

from __future__ import annotations

import datetime as dt
import random
import threading
from collections.abc import Iterator

from recall.informer import Informer
from recall.models import LABEL_SUSPENDED, TranscriptionJob
from recall.store import JobStore, RawObject, Selector

SELECTOR = Selector(fields="status.phase=Queued", labels=f"!{LABEL_SUSPENDED}")


def order_key(job: TranscriptionJob) -> tuple[int, dt.datetime, str]:
    """Higher priority first, then older first, then by name for a stable order."""
    created = job.metadata.creation_timestamp or dt.datetime.max.replace(tzinfo=dt.UTC)
    return (-job.spec.priority, created, job.name)


def claimable(job: TranscriptionJob, engine: str) -> bool:
    """Could this worker claim `job` now, by what it can see locally?

    A job that names no engine goes to any real engine; the simulated engine takes only jobs
    that ask for it, so a test worker never "transcribes" real media with made-up text. A job in
    backoff waits until the operator ends it.
    """
    wanted = job.spec.engine.name if job.spec.engine else None
    if wanted != engine and (wanted is not None or engine == "simulated"):
        return False
    return not job.suspended and job.status.backoff_seconds is None


def choose(
    candidates: list[TranscriptionJob], engine: str, window: int, rng: random.Random
) -> TranscriptionJob | None:
    """The pure part of `pick`: order, filter and choose among the head of the queue."""
    ready = sorted((j for j in candidates if claimable(j, engine)), key=order_key)
    if not ready:
        return None
    return rng.choice(ready[:window])


class JobQueue:
    """Claimable jobs of one namespace, from a list + watch in a background thread."""

    def __init__(
        self,
        store: JobStore,
        namespace: str | None,
        engine: str,
        *,
        window: int = 4,
        relist_seconds: float = 300.0,
        rng: random.Random | None = None,
    ) -> None:
        self.engine = engine
        self.window = window
        self.rng = rng or random.Random()
        self._jobs: dict[tuple[str, str], TranscriptionJob] = {}
        self._cond = threading.Condition()
        self._changes = 0
        self.informer = Informer(
            store, namespace, SELECTOR, self, name="queue-watch", relist_seconds=relist_seconds
        )

    def start(self) -> None:
        self.informer.start()

    def stop(self) -> None:
        self.informer.stop(timeout=0)
        with self._cond:
            self._cond.notify_all()

    # -- the informer's consumer ---------------------------------------------------------------

    def relisted(self, items: Iterator[RawObject]) -> None:
        jobs = {}
        for raw in items:
            job = TranscriptionJob.from_api(raw)
            jobs[job.key] = job
        with self._cond:
            self._jobs = jobs
            self._changes += 1
            self._cond.notify_all()

    def changed(self, type_: str, obj: RawObject) -> None:
        job = TranscriptionJob.from_api(obj)
        with self._cond:
            if type_ == "DELETED":
                self._jobs.pop(job.key, None)
            else:
                self._jobs[job.key] = job
            self._changes += 1
            self._cond.notify_all()

    # -- the worker's side -----------------------------------------------------------------------

    def pick(self) -> TranscriptionJob | None:
        with self._cond:
            candidates = list(self._jobs.values())
        return choose(candidates, self.engine, self.window, self.rng)

    def discard(self, job: TranscriptionJob) -> None:
        """Forget `job` until the watch brings it back (someone else claimed it)."""
        with self._cond:
            current = self._jobs.get(job.key)
            if (
                current is not None
                and current.metadata.resource_version == job.metadata.resource_version
            ):
                del self._jobs[job.key]

    def wait(self, timeout: float) -> None:
        """Block until the queue changes, `timeout` passes, or the queue stops."""
        with self._cond:
            seen = self._changes
            self._cond.wait_for(lambda: self._changes != seen or self.informer.stopping, timeout)
