"""Dispatch: the operator offers claimable jobs to idle workers.

Each worker watches only the jobs offered to it (`status.offer.worker`), so its reads do not
grow with the fleet and two workers rarely race for one job. An offer is only a hint: the
worker's fenced claim decides, and any worker may claim any Queued job (workers serve
themselves when no offer comes, for example while no operator runs).

`ReadyQueue` (a `JobCache` listener) keeps the claimable jobs (Queued, not in backoff, not
suspended, attempts left, not offered) by lane (namespace, pool, engine asked for), priority
and Batch. `pick` takes the highest priority; then the Batch with the fewest jobs leased or
offered (fair share: a small Batch behind a big one starts at once); then the lowest index (or
oldest job). A job picked whose offer or reject write then fails is put back (`requeue`).

**Slots.** A worker is offered up to its free slots (slots minus jobs held minus offers);
workers that hold jobs come first (the fleet packs, so whole workers empty for a scale-down).

**Offers not taken up.** An offer not claimed within `offer_seconds` is withdrawn. When its
worker held nothing (alive and idle, yet it claims nothing: its results store or model cache
refuses), that worker rests: it is offered nothing for `offer_seconds`, twice that after a second
such offer in a row, and so on up to `MAX_REST_SECONDS`, until it claims; meanwhile the job goes
to another worker. A worker whose registration says its engine failed is offered nothing
(`peers.registry`); both still serve themselves, and claim whatever they can.

**Offers ahead** (opt-in: `ahead_seconds` > 0; one-slot workers). A worker whose recent jobs
each took under `ahead_seconds`, and whose current job is younger than that, is offered its
next job (once per job held) before it completes, saving a round trip through the operator.
Such an offer is withdrawn after `offer_seconds`, or when a higher-priority job becomes
claimable in its pool; one claimed before that job appears has gone to a less urgent item:
hence off by default.

**What the pool cannot do.** A job that asks what only a multilingual model does (language
auto, options, segment scope, translation) and names no model, in a lane whose every live
worker registered an English-only model, is never offered: `pick_supported` fails it unleased
(`reject`) as its worker would (`engines.languages.english_only`), at most `MAX_REJECTS` per
offer. Not guaranteed: a worker that serves itself (no operator, or the `queue` dispatch mode)
may claim such a job first and fail it itself, once; a worker that has not said (loading, an
older release, an engine that loads no model) keeps its lane's jobs offerable.
"""

from __future__ import annotations

import heapq
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from recall.base.clock import Clock
from recall.engines.languages import english_only
from recall.operator.reconcile.record import JobRecord
from recall.protocol.observer import JobKey
from recall.resources import DEFAULT_POOL, Phase
from recall.resources.errors import JobFailure

WorkerKey = tuple[str, str]  # (namespace, worker id)
Lane = tuple[str, str, str | None]  # (namespace, pool, the engine a job asks for or None: any)
Group = str | None  # the Batch, or None for jobs without one
SortKey = tuple[int, str]  # (index or 0, creation time + name) — smallest first
_Heap = list[tuple[SortKey, JobKey]]  # a heapq
MAX_REST_SECONDS = 300.0  # the longest a worker whose offers expire is offered nothing


def lanes_for(namespace: str, engine: str, pool: str = DEFAULT_POOL) -> list[Lane]:
    """The lanes a worker of `engine` in `pool` takes from: its pool's jobs asking for its
    engine, and (real engines only) those asking for none."""
    if engine == "simulated":
        return [(namespace, pool, engine)]
    return [(namespace, pool, engine), (namespace, pool, None)]


@dataclass(frozen=True)
class Capacity:
    """A live worker as dispatch sees it."""

    key: WorkerKey
    engine: str
    pool: str = DEFAULT_POOL
    slots: int = 1
    multilingual: bool | None = None  # its registered model's, None: not said
    model: str = ""  # that model, `<model>@<digest>`


@dataclass
class _Hold:
    job: JobKey
    since: float  # first seen held, on the operator's clock
    offered: bool = False  # its holder was offered its next job ahead


class ReadyQueue:
    """Claimable jobs and who holds or was offered what. Thread-safe. `clock` dates offers
    (the operator's monotonic clock), so one that is not taken up in time can be withdrawn."""

    def __init__(self, clock: Clock, *, ahead_seconds: float = 0.0) -> None:
        self.clock = clock
        self.ahead_seconds = ahead_seconds
        self.offered_at: dict[JobKey, float] = {}
        # per holder: its current hold, and how long it held its last job
        self._held_since: dict[WorkerKey, _Hold] = {}
        self._last_hold: dict[WorkerKey, float] = {}
        self._lock = threading.Lock()
        self._where: dict[JobKey, tuple[Lane, int, Group, SortKey]] = {}
        self._heaps: defaultdict[Lane, defaultdict[int, dict[Group, _Heap]]] = defaultdict(
            lambda: defaultdict(dict)
        )
        self._active: defaultdict[tuple[str, Group], int] = defaultdict(int)
        self._activity: dict[JobKey, tuple[str, Group]] = {}
        self.holding: defaultdict[WorkerKey, set[JobKey]] = defaultdict(set)
        self.offered: dict[JobKey, WorkerKey] = {}
        self._offered_by: defaultdict[WorkerKey, set[JobKey]] = defaultdict(set)
        # per worker that let offers expire while idle: how many in a row, and its rest's end
        self._rests: dict[WorkerKey, tuple[int, float]] = {}

    # -- the cache's listener ----------------------------------------------------------------

    def update(self, old: JobRecord | None, new: JobRecord | None) -> None:
        with self._lock:
            placed = None  # its place in the queue, whose heap entry is still valid
            if old is not None:
                placed = self._where.get(old.key)
                self._drop(old)
                if new is None:
                    self.offered_at.pop(old.key, None)  # deleted while offered
            if new is not None:
                self._add(new, placed)
            if old is not None and old.lease is not None and self.ahead_seconds > 0:
                self._hold_ended((old.namespace, old.lease.holder), old.key)

    def _hold_ended(self, worker: WorkerKey, key: JobKey) -> None:
        """`worker` held `key`; if it does not any more, remember how long it did."""
        hold = self._held_since.get(worker)
        if hold is None or hold.job != key or key in self.holding.get(worker, ()):
            return
        del self._held_since[worker]
        self._last_hold[worker] = self.clock.monotonic() - hold.since

    def _drop(self, r: JobRecord) -> None:
        self._where.pop(r.key, None)  # its heap entry goes stale and is skipped
        group = self._activity.pop(r.key, None)
        if group is not None:
            self._active[group] -= 1
        if r.lease is not None:
            _discard(self.holding, (r.namespace, r.lease.holder), r.key)
        worker = self.offered.pop(r.key, None)
        if worker is not None:
            _discard(self._offered_by, worker, r.key)

    def _add(self, r: JobRecord, placed: tuple[Lane, int, Group, SortKey] | None = None) -> None:
        if r.phase is Phase.LEASED and r.lease is not None:
            worker = (r.namespace, r.lease.holder)
            self.holding[worker].add(r.key)
            self._rests.pop(worker, None)  # it claims again
            hold = self._held_since.get(worker)
            if self.ahead_seconds > 0 and (hold is None or hold.job != r.key):
                self._held_since[worker] = _Hold(r.key, self.clock.monotonic())
        if r.phase is Phase.QUEUED and r.offer is not None:
            self.offered[r.key] = (r.namespace, r.offer)
            self._offered_by[(r.namespace, r.offer)].add(r.key)
            self.offered_at.setdefault(r.key, self.clock.monotonic())
        else:
            self.offered_at.pop(r.key, None)
        if r.phase is Phase.LEASED or (r.phase is Phase.QUEUED and r.offer is not None):
            group = (r.namespace, r.batch)
            self._activity[r.key] = group
            self._active[group] += 1
        if r.claimable and r.offer is None:
            self._place(r, placed)

    def _place(self, r: JobRecord, placed: tuple[Lane, int, Group, SortKey] | None) -> None:
        lane = (r.namespace, r.pool, r.engine)
        created = r.created.isoformat() if r.created else ""
        sort = (r.index if r.index is not None else 0, f"{created}/{r.name}")
        self._where[r.key] = (lane, r.priority, r.batch, sort)
        if placed != self._where[r.key]:
            # unchanged (a relist, a write of something else): its heap entry stands; a second
            # would stay valid beside it and every relist would grow the heap by the queue
            heapq.heappush(self._heaps[lane][r.priority].setdefault(r.batch, []), (sort, r.key))

    def requeue(self, r: JobRecord) -> None:
        """Put `r` (the cache's version) back after an offer or reject write failed: a 5xx or a
        timeout brings no watch event, and a job picked and not put back waits for a relist."""
        with self._lock:
            if r.claimable and r.offer is None and r.key not in self.offered:
                self._place(r, self._where.get(r.key))

    # -- the dispatcher's side ---------------------------------------------------------------

    def free(self, worker: WorkerKey, slots: int = 1) -> int:
        """Slots of `worker` neither holding a job nor offered one."""
        with self._lock:
            return max(
                0, slots - len(self.holding.get(worker, ())) - len(self._offered_by.get(worker, ()))
            )

    def due_ahead(self, worker: WorkerKey) -> bool:
        """Whether one-slot `worker` holds a job, has no offer, and is due one ahead (module)."""
        with self._lock:
            last = self._last_hold.get(worker)
            hold = self._held_since.get(worker)
            return (
                not self._offered_by.get(worker)
                and bool(self.holding.get(worker))
                and last is not None
                and hold is not None
                and not hold.offered
                and last < self.ahead_seconds
                and self.clock.monotonic() - hold.since < self.ahead_seconds
            )

    def busy(self) -> set[WorkerKey]:
        """The workers that hold a job or were offered one (the autoscaler drains neither)."""
        with self._lock:
            return {w for w, jobs in self.holding.items() if jobs} | {
                w for w, jobs in self._offered_by.items() if jobs
            }

    def ahead_offers(self, slots: dict[WorkerKey, int] | None = None) -> list[JobKey]:
        """Offers ahead: to workers holding as many jobs as their `slots` (default 1)."""
        with self._lock:
            return [
                key
                for key, worker in self.offered.items()
                if len(self.holding.get(worker, ())) >= (slots or {}).get(worker, 1)
            ]

    def top_priority(self, lane: Lane) -> int | None:
        """The highest priority of a claimable job in `lane`, or None (stale heap heads are
        dropped on the way, so the answer is exact)."""
        with self._lock:
            priorities = self._heaps.get(lane)
            if not priorities:
                return None
            for priority in sorted(priorities, reverse=True):
                for group, heap in list(priorities[priority].items()):
                    while heap:
                        sort, key = heap[0]
                        if self._where.get(key) == (lane, priority, group, sort):
                            return priority
                        heapq.heappop(heap)
                    del priorities[priority][group]
            return None

    def keep_workers(self, alive: set[WorkerKey]) -> None:
        """Forget how long workers no longer alive held their jobs."""
        with self._lock:
            for worker in self._last_hold.keys() - alive:
                del self._last_hold[worker]

    def pick(self, namespace: str, engine: str, pool: str = DEFAULT_POOL) -> JobKey | None:
        """The next job for a worker of `engine` in `pool` of `namespace` (see the module
        docstring), taken out of the queue; None when nothing is claimable for it."""
        with self._lock:
            lanes = lanes_for(namespace, engine, pool)
            while True:
                choice = self._best(lanes)
                if choice is None:
                    return None
                lane, priority, group = choice
                heap = self._heaps[lane][priority][group]
                sort, key = heapq.heappop(heap)
                if not heap:
                    del self._heaps[lane][priority][group]
                if self._where.get(key) == (lane, priority, group, sort):
                    del self._where[key]
                    return key

    def _best(self, lanes: list[Lane]) -> tuple[Lane, int, Group] | None:
        # highest priority, then fewest active, then a stable order of groups (the first found)
        ranks = (
            (-priority, self._active.get((lane[0], group), 0), group or "", lane, group)
            for lane in lanes
            for priority, groups in self._heaps[lane].items()
            for group, heap in groups.items()
            if heap
        )
        best = min(ranks, key=lambda rank: rank[:3], default=None)
        return None if best is None else (best[3], -best[0], best[4])

    def offered_to(self, key: JobKey, worker: WorkerKey) -> None:
        """Record an offer just written, before the watch brings it back."""
        with self._lock:
            self.offered[key] = worker
            self._offered_by[worker].add(key)
            self.offered_at[key] = self.clock.monotonic()
            hold = self._held_since.get(worker)
            if hold is not None and self.holding.get(worker):
                hold.offered = True  # one offer ahead per job held, even if it is withdrawn

    def expired(self, key: JobKey, now_mono: float, seconds: float, alive: set[WorkerKey]) -> None:
        """The offer of `key` expired unclaimed. If its worker is alive and held nothing (idle,
        yet claiming nothing: a store it cannot write, say), offer it nothing for `seconds`,
        doubled for each such offer in a row up to `MAX_REST_SECONDS`, until it claims:
        meanwhile the job (the most urgent, as a rule) goes to another worker."""
        with self._lock:
            worker = self.offered.get(key)
            if worker is None or worker not in alive or self.holding.get(worker):
                return  # gone, or busy: an offer ahead that its job outlasted
            for w, (_, until) in list(self._rests.items()):
                if now_mono - until > MAX_REST_SECONDS:
                    del self._rests[w]  # long quiet (gone, most likely): start afresh
            n, until = self._rests.get(worker, (0, float("-inf")))
            if now_mono < until:
                return  # resting already: the same offer again (the watch lags), or a sibling
            n += 1
            rest = min(MAX_REST_SECONDS, seconds * 2 ** min(n - 1, 16))
            self._rests[worker] = (n, now_mono + rest)

    def resting(self, worker: WorkerKey, now_mono: float) -> bool:
        """Whether `worker` is offered nothing now (`expired`)."""
        with self._lock:
            rest = self._rests.get(worker)
            return rest is not None and now_mono < rest[1]

    def stale_offers(self, now_mono: float, seconds: float, alive: set[WorkerKey]) -> list[JobKey]:
        """Offers older than `seconds` on our clock, or to a worker no longer alive."""
        with self._lock:
            return [
                key
                for key, worker in self.offered.items()
                if worker not in alive or now_mono - self.offered_at.get(key, now_mono) > seconds
            ]


def free_slots(
    alive: list[Capacity], queue: ReadyQueue, now_mono: float | None = None
) -> list[Capacity]:
    """The live workers to offer a job to, one entry per free slot, in the order of **Slots**
    (the module docstring), then those of one slot due an offer ahead: a job never waits for a
    busy worker while one with room could take it. None of those resting (**Offers not taken
    up**)."""
    now = queue.clock.monotonic() if now_mono is None else now_mono
    partial: list[tuple[int, Capacity]] = []
    whole: list[Capacity] = []
    ahead: list[Capacity] = []
    for w in alive:
        if queue.resting(w.key, now):
            continue
        free = queue.free(w.key, w.slots)
        if free == w.slots:
            whole.extend([w] * free)
        elif free:
            partial.append((free, w))
        elif w.slots == 1 and queue.due_ahead(w.key):
            ahead.append(w)
    packed = [w for free, w in sorted(partial, key=lambda p: p[0]) for _ in range(free)]
    return packed + whole + ahead


def _discard(index: defaultdict[WorkerKey, set[JobKey]], worker: WorkerKey, key: JobKey) -> None:
    jobs = index.get(worker)
    if jobs is not None:
        jobs.discard(key)
        if not jobs:
            del index[worker]


MAX_REJECTS = 50  # jobs failed unleased per offer: a pass never stalls on a long run of them


def unsupported(record: JobRecord, workers: Sequence[Capacity]) -> JobFailure | None:
    """The failure every offerable worker of `record`'s lane would meet on it (it asks what
    only a multilingual model does, names no model, and each registered an English-only one);
    None when no such worker is alive, or one is multilingual or has not said."""
    if not record.asks or record.model:
        return None
    lane = (record.namespace, record.pool, record.engine)
    serving = [w for w in workers if lane in lanes_for(w.key[0], w.engine, w.pool)]
    if not serving or any(w.multilingual is not False for w in serving):
        return None
    models = sorted({w.model or w.engine for w in serving})
    return english_only(" and ".join(models), record.asks)


def pick_supported(
    queue: ReadyQueue,
    worker: Capacity,
    workers: Sequence[Capacity],
    get: Callable[[JobKey], JobRecord | None],
    reject: Callable[[JobRecord, JobFailure], object],
) -> JobRecord | None:
    """The next job for `worker` (`ReadyQueue.pick`) that a live worker of its lane can do;
    each picked before it that none can do is handed to `reject` (see the module docstring).
    None when nothing is left, or after `MAX_REJECTS` rejects (the next pass goes on)."""
    for _ in range(MAX_REJECTS + 1):
        key = queue.pick(worker.key[0], worker.engine, worker.pool)
        record = get(key) if key is not None else None
        if record is None:
            return None
        failure = unsupported(record, workers)
        if failure is None:
            return record
        reject(record, failure)
    return None
