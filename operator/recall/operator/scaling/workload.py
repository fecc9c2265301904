"""The outstanding work of a worker pool: what the autoscalers scale on.

A pool is the workers of one name and one engine in one namespace (one worker Deployment). Its
outstanding work is **claimable Queued** jobs (not suspended, not in backoff, attempts left;
offered or not) plus **Leased** ones, of the pool (`spec.pool`, none: `default`) and of the
engines it takes (`dispatch.lanes_for`). Leased jobs count because a slot holds one job at a
time: a scaler counting the queue alone would remove busy workers as they empty it. Scalers
divide the count by the pool's slots per worker.

Kept incrementally as a `JobCache` listener (O(1) per change), so the built-in scaler and the
KEDA endpoint read the same quantity without walking every job. Not counted: a Batch's items
whose jobs are not created yet (fan-out creates them within a few ticks), and jobs in backoff
until the operator ends it.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass

from recall.operator.dispatch import Lane, lanes_for
from recall.operator.reconcile.record import JobRecord
from recall.resources import DEFAULT_POOL, Phase


@dataclass(frozen=True)
class Outstanding:
    """A pool's outstanding work: claimable Queued jobs and Leased ones."""

    queued: int = 0
    leased: int = 0

    @property
    def total(self) -> int:
        return self.queued + self.leased


class Workload:
    """Outstanding jobs per lane (namespace, pool, engine asked for), from the job cache.
    Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queued: defaultdict[Lane, int] = defaultdict(int)
        self._leased: defaultdict[Lane, int] = defaultdict(int)

    def update(self, old: JobRecord | None, new: JobRecord | None) -> None:
        """The cache's listener: `old` became `new` (None: created or deleted)."""
        with self._lock:
            if old is not None:
                self._count(old, -1)
            if new is not None:
                self._count(new, +1)

    def _count(self, r: JobRecord, delta: int) -> None:
        lane = (r.namespace, r.pool, r.engine)
        if r.phase is Phase.LEASED:
            self._leased[lane] += delta
        elif r.claimable:
            self._queued[lane] += delta

    def of(self, namespace: str, engine: str, pool: str = DEFAULT_POOL) -> Outstanding:
        """The outstanding work of `pool` (its workers run `engine`) in `namespace`."""
        with self._lock:
            lanes = lanes_for(namespace, engine, pool)
            return Outstanding(
                queued=sum(self._queued.get(p, 0) for p in lanes),
                leased=sum(self._leased.get(p, 0) for p in lanes),
            )
