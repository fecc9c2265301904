"""Creating a Batch's jobs, several at once.

`JobCreator.create(batch, items)` creates the job of each item (`fanout.job_for_item`) and
returns one `Created` per item, in their order. A create is mostly a round trip: one at a time, a
fan-out would fall behind a few busy workers, so up to `CREATORS` run at once. A name already
taken is read back: the Batch's own job (created before, the cache not caught up yet) is
returned as found; a job that is not the Batch's is a conflict, never touched.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence
from dataclasses import dataclass

from recall.cache import JobRecord
from recall.fanout import job_for_item
from recall.items import Item
from recall.models import Batch
from recall.store import Conflict, JobStore, StoreError, Unavailable

CREATORS = 8  # jobs created at once


@dataclass(frozen=True)
class Created:
    """The outcome for one item: its job (made now, or found made before), or why not."""

    job: JobRecord | None = None
    created: bool = False
    error: str | None = None
    conflict: str | None = None
    retry: bool = False  # the API server could not take it now: the next tick tries again


class JobCreator:
    def __init__(self, store: JobStore) -> None:
        self.store = store
        self._pool = concurrent.futures.ThreadPoolExecutor(CREATORS, thread_name_prefix="create")

    def create(self, batch: Batch, items: Sequence[Item]) -> list[Created]:
        """Create the jobs of `items` (at most `CREATORS` of them) at once."""
        if len(items) == 1:
            return [self.create_one(batch, items[0])]
        return list(self._pool.map(lambda item: self.create_one(batch, item), items))

    def create_one(self, batch: Batch, item: Item) -> Created:
        manifest = job_for_item(batch, item)
        name = manifest["metadata"]["name"]
        try:
            job = self.store.create_job(batch.namespace, manifest)
        except Conflict:
            try:
                existing = self.store.get_job(batch.namespace, name)
            except StoreError as e:
                return Created(error=f"read {name}: {e.message}")
            if existing is not None and existing.spec.batch_ref != batch.name:
                return Created(
                    conflict=f"item {item.key}: a TranscriptionJob named {existing.name} exists "
                    f"and belongs to {existing.spec.batch_ref or 'no Batch'}"
                )
            return Created(None if existing is None else JobRecord.of(existing))
        except StoreError as e:
            return Created(error=f"create {name}: {e.message}", retry=isinstance(e, Unavailable))
        return Created(JobRecord.of(job), created=True)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
