"""The notifier's indexes: what a pass needs, found without walking every owed event or item.

- `Items`: each Batch's item events as counts (delivered, pending by type) and its given-up
  items, kept current from the job cache's changes, O(1) per change, so a Batch's record,
  settling and finalizer never walk its jobs. Only the types some sink wants
  (`state.item_types`) count as pending: an item event no sink wants is settled as it happens.
- `Ready`: per sink (its gate), the tries waiting to be sent, in a heap by the time each may
  go: a pass takes what is due, O(log n) a try, and never looks at a sink that backs off.
- `Deadlines`: deleted objects' events, in the order their `delete_seconds` run out.

Not thread-safe: the notifier calls them under its lock. An entry of `Ready` or `Deadlines`
whose event has gone since is skipped when it comes out (the notifier checks), not searched for.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter, deque
from collections.abc import Collection
from dataclasses import dataclass, field

from recall.operator.notify.state import Key, event_type, owes
from recall.operator.reconcile.record import BatchKey, JobRecord
from recall.protocol.observer import JobKey
from recall.resources.batch import NotifiedItems
from recall.resources.indexes import encode


@dataclass
class ItemTally:
    """One Batch's jobs and their events: settled (delivered, given up by index) or owed (by
    type: whether it is pending depends on which types the Batch's sinks want)."""

    jobs: int = 0
    delivered: int = 0
    owed: Counter[str] = field(default_factory=Counter)  # event type: items that owe it
    given_up: dict[JobKey, int] = field(default_factory=dict)  # the job: its index (-1: none)

    def pending(self, types: Collection[str]) -> int:
        """The item events of `types` (those some sink wants) owed and not settled: O(1)."""
        return sum(self.owed[t] for t in types)

    def record(self, types: Collection[str]) -> NotifiedItems:
        """The counts and the given-up indexes as ranges, as `status.notified.items` keeps
        them (sorting the given-up ones: done for a write, not for a check). An item whose
        event no sink wants (not of `types`) is in none of the counts."""
        ranges, _ = encode(sorted(i for i in self.given_up.values() if i >= 0))
        return NotifiedItems(
            delivered=self.delivered,
            given_up=len(self.given_up),
            pending=self.pending(types),
            given_up_indexes=ranges or None,
        )


class Items:
    """Every Batch's `ItemTally`, changed by the job cache's (old, new) records."""

    def __init__(self) -> None:
        self._batches: dict[BatchKey, ItemTally] = {}

    def changed(self, old: JobRecord | None, new: JobRecord | None) -> None:
        if old is not None and old.batch_key is not None:
            tally = self._batches.get(old.batch_key)
            if tally is not None:
                self._count(tally, old, -1)
                if tally.jobs <= 0:
                    del self._batches[old.batch_key]
        if new is not None and new.batch_key is not None:
            self._count(self._batches.setdefault(new.batch_key, ItemTally()), new, 1)

    @staticmethod
    def _count(tally: ItemTally, r: JobRecord, sign: int) -> None:
        tally.jobs += sign
        if r.notified == "delivered":
            tally.delivered += sign
        elif r.notified == "givenUp":
            if sign > 0:
                tally.given_up[r.key] = r.index if r.index is not None else -1
            else:
                tally.given_up.pop(r.key, None)
        elif owes(r):
            tally.owed[event_type(r)] += sign

    def of(self, batch: BatchKey) -> ItemTally | None:
        """The Batch's tally; None when the cache holds none of its jobs (the TTL deleted them)."""
        return self._batches.get(batch)


class Ready:
    """Per gate, the (time, event, sink url) of each try waiting to be sent."""

    def __init__(self) -> None:
        self._heaps: dict[str, list[tuple[float, int, Key, str]]] = {}
        self._seq = itertools.count()

    def push(self, gate: str, at: float, key: Key, url: str) -> None:
        heapq.heappush(self._heaps.setdefault(gate, []), (at, next(self._seq), key, url))

    def gates(self) -> list[str]:
        return list(self._heaps)

    def due(self, gate: str, mono: float) -> tuple[Key, str] | None:
        """The next try of `gate` whose time has come, taken out; None if none has."""
        heap = self._heaps.get(gate)
        if not heap or heap[0][0] > mono:
            return None
        _, _, key, url = heapq.heappop(heap)
        if not heap:
            del self._heaps[gate]
        return key, url

    def clear(self) -> None:
        self._heaps.clear()


class Deadlines:
    """Deleted objects' events by the time they are given up (`delete_seconds` after)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._queue: deque[tuple[float, Key]] = deque()

    def deleted(self, key: Key, mono: float) -> None:
        self._queue.append((mono + self.seconds, key))  # one delay for all: kept in order

    def expired(self, mono: float) -> list[Key]:
        out = []
        while self._queue and self._queue[0][0] <= mono:
            out.append(self._queue.popleft()[1])
        return out

    def clear(self) -> None:
        self._queue.clear()
