"""The worker's view of the queue: the jobs offered to it (`OfferQueue`, the default), or every
claimable job (`JobQueue`, the `queue` dispatch mode), kept current by an `Informer`.

The informer lists and watches the jobs the API server selects with `status.phase=Queued` and
without the `recall.dev/suspended` label; jobs that leave the selection arrive as DELETED.
`pick()` chooses by priority then age, at random among the first `window` candidates, so that
many workers do not all race for the head of the queue (`choose` is the pure part).

Not guaranteed: the view may lag the API server by one event; a claim is decided by the fenced
write, never by this view.
"""

from __future__ import annotations

import datetime as dt
import random
import threading
from collections.abc import Iterator

from recall.base.clock import SYSTEM, Clock
from recall.base.settings import WorkerSettings
from recall.kube import ApiError, JobApi, RawObject, Selector
from recall.kube.informer import Informer, Selection
from recall.resources import DEFAULT_POOL, LABEL_SUSPENDED, TranscriptionJob

JobKey = tuple[str, str]  # (namespace, name)

SELECTOR = Selector(fields="status.phase=Queued", labels=f"!{LABEL_SUSPENDED}")


def order_key(job: TranscriptionJob) -> tuple[int, dt.datetime, str]:
    """Higher priority first, then older first, then by name for a stable order."""
    created = job.metadata.creation_timestamp or dt.datetime.max.replace(tzinfo=dt.UTC)
    return (-job.spec.priority, created, job.name)


def claimable(job: TranscriptionJob, engine: str, pool: str = DEFAULT_POOL) -> bool:
    """Could a worker of `engine` in `pool` claim `job` now, by what it can see locally? A job
    belongs to the pool it names (none: default). A job naming no engine goes to any real engine;
    the simulated engine takes only jobs that ask for it, so a test worker never "transcribes"
    real media. A job in backoff waits until the operator ends it."""
    if job.pool != pool:
        return False
    wanted = job.spec.engine.name if job.spec.engine else None
    if wanted != engine and (wanted is not None or engine == "simulated"):
        return False
    return not job.suspended and job.status.backoff_seconds is None


SELF_SERVE_PAGE = 200
SELF_SERVE_PAGES = 5  # a self-serve reads at most 1,000 Queued jobs, in 5 requests


def self_serve_selector(pool: str) -> Selector:
    """The Queued, unsuspended jobs of `pool`, as far as the API server can select them: a job
    of the default pool may name none, so that pool's workers filter the others out."""
    pool_field = "" if pool == DEFAULT_POOL else f",spec.pool={pool}"
    return Selector(fields=f"{SELECTOR.fields}{pool_field}", labels=SELECTOR.labels)


def fair_choice(
    candidates: list[TranscriptionJob],
    engine: str,
    rng: random.Random,
    window: int = 4,
    pool: str = DEFAULT_POOL,
) -> TranscriptionJob | None:
    """Self-service: the highest priority; among its Batches one at random (a small Batch is as
    likely as a big one); among that Batch's oldest `window` jobs one at random."""
    ready = [j for j in candidates if claimable(j, engine, pool)]
    if not ready:
        return None
    top = max(j.spec.priority for j in ready)
    by_batch: dict[str | None, list[TranscriptionJob]] = {}
    for j in ready:
        if j.spec.priority == top:
            by_batch.setdefault(j.spec.batch_ref, []).append(j)
    batch = rng.choice(sorted(by_batch, key=lambda b: b or ""))
    return rng.choice(sorted(by_batch[batch], key=order_key)[:window])


def choose(
    candidates: list[TranscriptionJob],
    engine: str,
    window: int,
    rng: random.Random,
    pool: str = DEFAULT_POOL,
) -> TranscriptionJob | None:
    """The pure part of `pick`: order, filter and choose among the head of the queue."""
    ready = sorted((j for j in candidates if claimable(j, engine, pool)), key=order_key)
    if not ready:
        return None
    return rng.choice(ready[:window])


class WatchedJobs:
    """Jobs kept current by an informer (this is its consumer), and a condition to wait on."""

    def __init__(self, source: Selection, name: str, relist_seconds: float = 300.0) -> None:
        self._jobs: dict[tuple[str, str], TranscriptionJob] = {}
        self._cond = threading.Condition()
        self._changes = 0
        self.informer = Informer(source, self, name=name, relist_seconds=relist_seconds)

    def start(self) -> None:
        self.informer.start()

    def stop(self) -> None:
        self.informer.stop(timeout=0)
        with self._cond:
            self._cond.notify_all()

    def relisted(self, items: Iterator[RawObject]) -> None:
        jobs = {job.key: job for job in map(TranscriptionJob.from_api, items)}
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

    def discard(self, job: TranscriptionJob) -> None:
        """Forget `job` until the watch brings it back (someone else claimed it)."""
        with self._cond:
            current = self._jobs.get(job.key)
            if current is not None and current.resource_version == job.resource_version:
                del self._jobs[job.key]

    def changes(self) -> int:
        """A count of the view's changes; `wait(since=...)` returns at once if it moved."""
        with self._cond:
            return self._changes

    def wait(self, timeout: float, since: int | None = None) -> None:
        """Until the view changes after `since` (taken before a pick that found nothing: an
        offer arriving in between is not slept through), `timeout` passes, or it stops."""
        with self._cond:
            seen = self._changes if since is None else since
            self._cond.wait_for(lambda: self._changes != seen or self.informer.stopping, timeout)


class JobQueue(WatchedJobs):
    """Claimable jobs of one namespace, from a list + watch in a background thread."""

    def __init__(
        self,
        store: JobApi,
        namespace: str | None,
        engine: str,
        *,
        window: int = 4,
        relist_seconds: float = 300.0,
        pool: str = DEFAULT_POOL,
    ) -> None:
        super().__init__(Selection.jobs(store, namespace, SELECTOR), "queue-watch", relist_seconds)
        self.engine = engine
        self.pool = pool
        self.window = window
        self.rng = random.Random()

    # -- the worker's side -----------------------------------------------------------------------

    def pick(self, exclude: frozenset[JobKey] = frozenset()) -> TranscriptionJob | None:
        """A claimable job, none of `exclude` (those the worker's other slots are taking)."""
        with self._cond:
            candidates = [j for k, j in self._jobs.items() if k not in exclude]
        return choose(candidates, self.engine, self.window, self.rng, self.pool)


class OfferQueue(WatchedJobs):
    """The jobs whose `status.offer.worker` names this worker (what it reads does not grow with
    the number of workers); when a slot of it was idle `self_serve_seconds` with no offer, the
    Queued jobs of its pool (`self_serve_selector`, up to `SELF_SERVE_PAGES` pages) and
    `fair_choice` among those it can claim, so work goes on while no operator runs. The idle
    time counts from the first pick that finds nothing after one that found a job: a job that
    ran long is followed by offers, not by a self-serve before the operator saw it complete.

    Not guaranteed: with more Queued jobs in the pool than those pages hold, a more urgent job
    beyond them is not seen (the API server lists by name)."""

    def __init__(
        self,
        store: JobApi,
        namespace: str,
        worker: str,
        engine: str,
        *,
        self_serve_seconds: float = 10.0,
        clock: Clock = SYSTEM,
        pool: str = DEFAULT_POOL,
    ) -> None:
        super().__init__(
            Selection.jobs(store, namespace, Selector(fields=f"status.offer.worker={worker}")),
            "offer-watch",
        )
        self.store = store
        self.namespace = namespace
        self.engine = engine
        self.pool = pool
        self.self_serve_seconds = self_serve_seconds
        self.clock = clock
        self.rng = random.Random()
        self._idle_since: float | None = clock.monotonic()  # None: the last pick found a job

    def pick(self, exclude: frozenset[JobKey] = frozenset()) -> TranscriptionJob | None:
        with self._cond:
            offered = sorted((j for k, j in self._jobs.items() if k not in exclude), key=order_key)
        for job in offered:
            if claimable(job, self.engine, self.pool):
                self._idle_since = None
                return job
        now = self.clock.monotonic()
        if self._idle_since is None:
            self._idle_since = now  # a slot came free: the operator's offer gets its time
        if now - self._idle_since < self.self_serve_seconds:
            return None
        chosen = self._serve_self(exclude)
        self._idle_since = None if chosen is not None else now
        return chosen

    def _serve_self(self, exclude: frozenset[JobKey]) -> TranscriptionJob | None:
        selector, token = self_serve_selector(self.pool), None
        ready: list[TranscriptionJob] = []
        for _ in range(SELF_SERVE_PAGES):
            try:
                page = self.store.list_jobs(
                    self.namespace, selector, limit=SELF_SERVE_PAGE, continue_from=token
                )
            except ApiError:
                break  # choose among what was read (a 410: the list changed too much)
            jobs = (j for j in map(TranscriptionJob.from_api, page.items) if j.key not in exclude)
            ready += [j for j in jobs if claimable(j, self.engine, self.pool)]
            token = page.next
            if token is None:
                break
        return fair_choice(ready, self.engine, self.rng, pool=self.pool)

    def wait(self, timeout: float, since: int | None = None) -> None:
        """Block until an offer changes, `timeout` passes, or it is time to serve oneself."""
        idle = 0.0 if self._idle_since is None else self.clock.monotonic() - self._idle_since
        super().wait(max(0.05, min(timeout, self.self_serve_seconds - idle)), since)


Queue = JobQueue | OfferQueue  # the worker loop's view of the queue


def queue_of(
    store: JobApi, namespace: str, settings: WorkerSettings, engine: str, clock: Clock
) -> Queue:
    """The worker's view of the queue for its `dispatch` mode: its offers, or every job."""
    if settings.dispatch == "offers":
        return OfferQueue(
            store,
            namespace,
            settings.id,
            engine,
            self_serve_seconds=settings.self_serve_seconds,
            clock=clock,
            pool=settings.pool,
        )
    return JobQueue(
        store,
        namespace,
        engine,
        window=settings.pick_window,
        relist_seconds=settings.relist_seconds,
        pool=settings.pool,
    )
