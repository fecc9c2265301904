"""The per-Batch gauges: `recall_batch_items` and `recall_batch_suspended`.

`BatchGauges.export(batches)` sets each Batch's series as its status last seen counts its items,
and removes the series of every Batch it exported before and is not given now. Only the leader
exports its Batches; a standby exports none, so a stale replica's figures never stand beside the
leader's. Not guaranteed: the figures are as fresh as the last status seen, not the jobs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from recall.base import metrics
from recall.operator.reconcile.record import BatchKey
from recall.resources import Batch, Counts, ItemPhase


class BatchGauges:
    """The series of the Batches last exported, to remove those of a Batch gone."""

    def __init__(self) -> None:
        self._exported: set[str] = set()  # the Batches recall_batch_items has series of

    def export(self, batches: Mapping[BatchKey, Batch]) -> None:
        """Set each Batch's series as its status last seen counts; remove those of any other
        (deleted, or every one on a replica that does not lead)."""
        names = set()
        for batch in batches.values():
            name = f"{batch.namespace}/{batch.name}"
            names.add(name)
            counts = batch.status.counts or Counts()
            for phase in ItemPhase:
                metrics.BATCH_ITEMS.labels(batch=name, phase=phase.value).set(
                    getattr(counts, phase.value)
                )
            metrics.BATCH_SUSPENDED.labels(batch=name).set(1 if batch.spec.suspend else 0)
        for name in self._exported - names:
            with contextlib.suppress(KeyError):  # another controller of the process (tests)
                for phase in ItemPhase:
                    metrics.BATCH_ITEMS.remove(name, phase.value)
                metrics.BATCH_SUSPENDED.remove(name)
        self._exported = names
