"""Dispatch: the operator offers claimable jobs to idle workers.

Each worker watches only the jobs offered to it (`status.offer.worker`), so what a worker reads
does not grow with the number of workers, and two workers rarely race for one job. An offer is
a hint written on a Queued job; the worker's claim (a fenced write) still decides, and any
worker may claim any Queued job (workers serve themselves when no offer comes, for example
while no operator runs).

`ReadyQueue` keeps, incrementally (as a `JobCache` listener), the claimable jobs — Queued, not
in backoff, not suspended, attempts left, not offered — grouped by namespace, engine, priority
and Batch, and who holds or was offered what. `pick(namespace, engine)` chooses the next job for
a worker: the highest priority first; among the Batches of that priority the one with the
fewest jobs leased or offered (fair share: a small Batch behind a big one starts at once); the
lowest index (or oldest job) within it.

**Offers ahead** (opt-in: `ahead_seconds` > 0). A worker whose recent jobs each took less than
`ahead_seconds` is offered its next job while it still holds one, so that it claims the next
one as soon as it completes, not after a round trip through the operator. Only while its
current job is itself younger than `ahead_seconds`: a job that runs long gets at most that one
offer ahead, which is withdrawn after `offer_seconds` like any other. Jobs of minutes never get
one. An offer ahead is also withdrawn when a job of higher priority becomes claimable in its
pool, but one claimed before that job appears has gone to a less urgent item: that is why it
is off by default.
"""

from __future__ import annotations

import heapq
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from recall.operator.cache import JobRecord
from recall.protocol.observer import JobKey
from recall.resources import Phase

WorkerKey = tuple[str, str]  # (namespace, worker id)
Pool = tuple[str, str | None]  # (namespace, the engine a job asks for, or None for any)
Group = str | None  # the Batch, or None for jobs without one
SortKey = tuple[int, str]  # (index or 0, creation time + name) — smallest first


def ready(r: JobRecord) -> bool:
    """Claimable now, by what the operator sees."""
    free = min(r.releases, r.max_releases)
    return (
        r.phase is Phase.QUEUED
        and r.backoff_seconds is None
        and r.offer is None
        and not r.suspended
        and r.attempts < r.max_attempts + free
    )


def pools_for(namespace: str, engine: str) -> list[Pool]:
    """The pools a worker of `engine` takes from: jobs asking for it, and (real engines only)
    jobs asking for none."""
    return (
        [(namespace, engine)] if engine == "simulated" else [(namespace, engine), (namespace, None)]
    )


@dataclass
class _Hold:
    job: JobKey
    since: float  # first seen held, on the operator's clock
    offered: bool = False  # its holder was offered its next job ahead


@dataclass
class _Heap:
    entries: list[tuple[SortKey, JobKey]] = field(default_factory=list)


class ReadyQueue:
    """Claimable jobs and who holds or was offered what. Thread-safe. `clock` dates offers
    (the operator's monotonic clock), so one that is not taken up in time can be withdrawn."""

    def __init__(self, clock: Callable[[], float], *, ahead_seconds: float = 0.0) -> None:
        self.clock = clock
        self.ahead_seconds = ahead_seconds
        self.offered_at: dict[JobKey, float] = {}
        # each holder's job, when it was first seen holding it, and whether it was offered
        # its next job ahead during that hold; how long each worker held its last job
        self._held_since: dict[WorkerKey, _Hold] = {}
        self._last_hold: dict[WorkerKey, float] = {}
        self._lock = threading.Lock()
        self._where: dict[JobKey, tuple[Pool, int, Group, SortKey]] = {}
        self._heaps: defaultdict[Pool, defaultdict[int, dict[Group, _Heap]]] = defaultdict(
            lambda: defaultdict(dict)
        )
        self._active: defaultdict[tuple[str, Group], int] = defaultdict(int)
        self._activity: dict[JobKey, tuple[str, Group]] = {}
        self.holding: dict[WorkerKey, JobKey] = {}
        self.offered: dict[JobKey, WorkerKey] = {}
        self._offered_by: dict[WorkerKey, JobKey] = {}

    # -- the cache's listener ----------------------------------------------------------------

    def update(self, old: JobRecord | None, new: JobRecord | None) -> None:
        with self._lock:
            if old is not None:
                self._drop(old)
            if new is not None:
                self._add(new)
            if old is not None and old.lease is not None and self.ahead_seconds > 0:
                self._hold_ended((old.namespace, old.lease.holder), old.key)

    def _hold_ended(self, worker: WorkerKey, key: JobKey) -> None:
        """`worker` held `key`; if it does not any more, remember how long it did."""
        hold = self._held_since.get(worker)
        if hold is None or hold.job != key or self.holding.get(worker) == key:
            return
        del self._held_since[worker]
        self._last_hold[worker] = self.clock() - hold.since

    def _drop(self, r: JobRecord) -> None:
        self._where.pop(r.key, None)  # its heap entry goes stale and is skipped
        group = self._activity.pop(r.key, None)
        if group is not None:
            self._active[group] -= 1
        if r.lease is not None and self.holding.get((r.namespace, r.lease.holder)) == r.key:
            del self.holding[(r.namespace, r.lease.holder)]
        worker = self.offered.pop(r.key, None)
        if worker is not None and self._offered_by.get(worker) == r.key:
            del self._offered_by[worker]

    def _add(self, r: JobRecord) -> None:
        if r.phase is Phase.LEASED and r.lease is not None:
            worker = (r.namespace, r.lease.holder)
            self.holding[worker] = r.key
            hold = self._held_since.get(worker)
            if self.ahead_seconds > 0 and (hold is None or hold.job != r.key):
                self._held_since[worker] = _Hold(r.key, self.clock())
        if r.phase is Phase.QUEUED and r.offer is not None:
            self.offered[r.key] = (r.namespace, r.offer)
            self._offered_by[(r.namespace, r.offer)] = r.key
            self.offered_at.setdefault(r.key, self.clock())
        else:
            self.offered_at.pop(r.key, None)
        if r.phase is Phase.LEASED or (r.phase is Phase.QUEUED and r.offer is not None):
            group = (r.namespace, r.batch)
            self._activity[r.key] = group
            self._active[group] += 1
        if ready(r):
            pool = (r.namespace, r.engine)
            created = r.created.isoformat() if r.created else ""
            sort = (r.index if r.index is not None else 0, f"{created}/{r.name}")
            self._where[r.key] = (pool, r.priority, r.batch, sort)
            heapq.heappush(
                self._heaps[pool][r.priority].setdefault(r.batch, _Heap()).entries, (sort, r.key)
            )

    # -- the dispatcher's side ---------------------------------------------------------------

    def state(self, worker: WorkerKey) -> str:
        """`idle` (no job, no offer), `ahead` (holds a job and is due an offer ahead, see the
        module docstring) or `busy`."""
        with self._lock:
            if worker in self._offered_by:
                return "busy"
            if worker not in self.holding:
                return "idle"
            last = self._last_hold.get(worker)
            hold = self._held_since.get(worker)
            due = (
                last is not None
                and hold is not None
                and not hold.offered
                and last < self.ahead_seconds
                and self.clock() - hold.since < self.ahead_seconds
            )
            return "ahead" if due else "busy"

    def busy(self) -> set[WorkerKey]:
        """The workers that hold a job or were offered one (the autoscaler drains neither)."""
        with self._lock:
            return set(self.holding) | set(self._offered_by)

    def ahead_offers(self) -> list[JobKey]:
        """Offers to workers that still hold a job (offers ahead, not yet claimable)."""
        with self._lock:
            return [key for key, worker in self.offered.items() if worker in self.holding]

    def top_priority(self, pool: Pool) -> int | None:
        """The highest priority of a claimable job in `pool`, or None (stale heap heads are
        dropped on the way, so the answer is exact)."""
        with self._lock:
            priorities = self._heaps.get(pool)
            if not priorities:
                return None
            for priority in sorted(priorities, reverse=True):
                for group, heap in list(priorities[priority].items()):
                    while heap.entries:
                        sort, key = heap.entries[0]
                        if self._where.get(key) == (pool, priority, group, sort):
                            return priority
                        heapq.heappop(heap.entries)
                    del priorities[priority][group]
            return None

    def keep_workers(self, alive: set[WorkerKey]) -> None:
        """Forget how long workers no longer alive held their jobs."""
        with self._lock:
            for worker in self._last_hold.keys() - alive:
                del self._last_hold[worker]

    def pick(self, namespace: str, engine: str) -> JobKey | None:
        """The next job for a worker of `engine` in `namespace` (see the module docstring),
        taken out of the queue; None when nothing is claimable for it."""
        with self._lock:
            pools = pools_for(namespace, engine)
            while True:
                choice = self._best(pools)
                if choice is None:
                    return None
                pool, priority, group = choice
                heap = self._heaps[pool][priority][group].entries
                sort, key = heapq.heappop(heap)
                if not heap:
                    del self._heaps[pool][priority][group]
                where = self._where.get(key)
                if where is not None and where == (pool, priority, group, sort):
                    del self._where[key]
                    return key

    def _best(self, pools: list[Pool]) -> tuple[Pool, int, Group] | None:
        best: tuple[int, int, str, Pool, Group] | None = None
        for pool in pools:
            for priority, groups in self._heaps[pool].items():
                for group, heap in groups.items():
                    if not heap.entries:
                        continue
                    active = self._active.get((pool[0], group), 0)
                    # highest priority, then fewest active, then a stable order of groups
                    rank = (-priority, active, group or "", pool, group)
                    if best is None or rank[:3] < best[:3]:
                        best = rank
        if best is None:
            return None
        return best[3], -best[0], best[4]

    def offered_to(self, key: JobKey, worker: WorkerKey) -> None:
        """Record an offer just written, before the watch brings it back."""
        with self._lock:
            self.offered[key] = worker
            self._offered_by[worker] = key
            self.offered_at[key] = self.clock()
            hold = self._held_since.get(worker)
            if hold is not None and worker in self.holding:
                hold.offered = True  # one offer ahead per job held, even if it is withdrawn

    def stale_offers(self, now_mono: float, seconds: float, alive: set[WorkerKey]) -> list[JobKey]:
        """Offers older than `seconds` on our clock, or to a worker no longer alive."""
        with self._lock:
            return [
                key
                for key, worker in self.offered.items()
                if worker not in alive or now_mono - self.offered_at.get(key, now_mono) > seconds
            ]


def idle(alive: list[tuple[WorkerKey, str]], queue: ReadyQueue) -> list[tuple[WorkerKey, str]]:
    """The live workers (key, engine) to offer a job to, in order: the idle ones (no job, no
    offer) first, then those due an offer ahead — a job never waits for a busy worker while
    an idle one could take it."""
    states = [(queue.state(w), (w, engine)) for w, engine in alive]
    return [w for s, w in states if s == "idle"] + [w for s, w in states if s == "ahead"]
