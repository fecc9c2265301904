"""Per Batch, which items changed since the last projection that was written.

The job cache marks an item when its job changes (`recall.operator.reconcile.cache`); the apply
clears the marks a written projection covered (`recall.operator.reconcile.apply`). Thread-safe.
"""

from __future__ import annotations

import threading
from collections import defaultdict

from recall.operator.reconcile.record import BatchKey


class Marks:
    """A mark carries a sequence number; `clear(batch, upto)` removes only marks made up to the
    projection's snapshot, so a change seen while a write is in flight is never dropped. A mark
    also says whether the item's phase may have moved (`moved`: the job's phase or attempt
    changed, or the job went). Every mark makes its Batch projected again; only a moved item's
    stored phase may differ from its job's without that being a heal. A change that cannot
    move the phase (a publish record, counters, a store verdict) leaves the judgement intact.
    """

    def __init__(self) -> None:
        self._seq = 0
        self._marks: defaultdict[BatchKey, dict[int, tuple[int, bool]]] = defaultdict(dict)
        self._lock = threading.Lock()

    def mark(self, batch: BatchKey, index: int, *, moved: bool = True) -> None:
        with self._lock:
            self._seq += 1
            _, before = self._marks[batch].get(index, (0, False))
            self._marks[batch][index] = (self._seq, moved or before)

    def seq(self) -> int:
        """The last mark's sequence number: taken before the jobs are read, the point to clear
        up to once their projection is written (a later change keeps its mark)."""
        with self._lock:
            return self._seq

    def moved(self, batch: BatchKey) -> frozenset[int]:
        """The items of `batch` whose phase may have moved. Taken after the jobs are read, so
        that a change that reached them after `seq()` is judged a change, not a heal."""
        with self._lock:
            marks = self._marks.get(batch, {})
            return frozenset(i for i, (_, moved) in marks.items() if moved)

    def clear(self, batch: BatchKey, upto: int) -> None:
        with self._lock:
            marks = self._marks.get(batch)
            if marks is None:
                return
            for index in [i for i, (seq, _) in marks.items() if seq <= upto]:
                del marks[index]
            if not marks:
                del self._marks[batch]

    def dirty(self) -> set[BatchKey]:
        with self._lock:
            return set(self._marks)
