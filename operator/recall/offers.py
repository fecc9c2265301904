"""Writing offers and taking them back (which job to offer whom is `recall.dispatch`).

An offer is one write of `status.offer`, guarded by the version the job was chosen from: a 409
means it changed meanwhile, and it is not offered. The protocol's verdict (`lease.offer`,
`lease.withdraw`) is asked first, from the operator's compact record. The offers of one
dispatch pass are written up to `OFFER_WRITERS` at once.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Sequence

from recall import lease, metrics
from recall.cache import JobRecord
from recall.models import JobStatus, Offer
from recall.store import JobStore, StoreError

OFFER_WRITERS = 4  # offers written at once


def _status_of(record: JobRecord) -> JobStatus:
    """The part of a job's status an offer depends on."""
    return JobStatus(
        phase=record.phase,
        attempts=record.attempts,
        releases=record.releases,
        backoff_seconds=record.backoff_seconds,
        offer=Offer(worker=record.offer) if record.offer else None,
    )


class OfferWriter:
    """`leading` is asked before each write: a replica that stepped down writes no more."""

    def __init__(self, store: JobStore, leading: Callable[[], bool] = lambda: True) -> None:
        self.store = store
        self.leading = leading
        self._pool = concurrent.futures.ThreadPoolExecutor(
            OFFER_WRITERS, thread_name_prefix="offer"
        )

    def offer_all(self, offers: Sequence[tuple[JobRecord, str]]) -> list[bool]:
        """`offer` each (job, worker), several at once; whether each was written, in order."""
        if len(offers) <= 1:
            return [self.offer(record, worker) for record, worker in offers]
        return list(self._pool.map(lambda o: self.offer(*o), offers))

    def offer(self, record: JobRecord, worker: str) -> bool:
        """Offer a claimable job to `worker`."""
        if not self.leading() or isinstance(lease.offer(_status_of(record), worker), lease.Refusal):
            return False
        try:
            self.store.patch_job_status(
                record.namespace,
                record.name,
                record.resource_version,
                {"offer": {"worker": worker}},
            )
        except StoreError:
            return False
        metrics.OFFERS.inc()
        return True

    def withdraw(self, record: JobRecord) -> bool:
        """Take back an offer its worker did not take up in time."""
        if not self.leading() or isinstance(lease.withdraw(_status_of(record)), lease.Refusal):
            return False
        try:
            self.store.patch_job_status(
                record.namespace, record.name, record.resource_version, {"offer": None}
            )
        except StoreError:
            return False
        metrics.OFFERS_WITHDRAWN.inc()
        return True

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
