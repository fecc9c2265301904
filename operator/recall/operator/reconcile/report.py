"""What one apply did (`Report`), and the log lines and Events that say it.

`apply` fills a `Report` as it writes; the controller logs it after its tick (`log_report`).
Only what was written is reported: a failed write is an error, tried again at the next tick.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from recall.base import log
from recall.kube import ObjectRef
from recall.operator.reconcile.record import BatchKey

_log = log.get("operator")

# Post an Event about an object: (object, type, reason, message); best effort.
PostEvent = Callable[[ObjectRef, str, str, str], None]


class Reclaimed(NamedTuple):
    """One reclaim: the job, the phase it got, how late on the operator's clock (seconds past
    the expiry it observed) and, for a look from outside, seconds since the lease's renewTime
    by this machine's wall clock (the worker's clock: skew shows here, never in a decision)."""

    job: str
    phase: str
    overdue: float
    since_renewal: float | None


@dataclass
class Report:
    """What one apply did."""

    batch: BatchKey | None
    reclaimed: list[Reclaimed] = field(default_factory=list)
    expired_holders: list[tuple[str, str]] = field(default_factory=list)  # (namespace, worker)
    created: list[str] = field(default_factory=list)
    heals: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    status_written: bool = False
    more: bool = False  # jobs left to create (the time budget of one apply ran out)


def log_report(report: Report, event: PostEvent) -> None:
    """Log what `report` says was done (reclaims, fan-out, heals, errors); a job name taken by
    another Batch's job is also posted as an Event on the Batch."""
    ns, name = report.batch or (None, None)
    for r in report.reclaimed:
        _log.info(
            "reclaimed",
            job=r.job,
            namespace=ns,
            batch=name,
            phase=r.phase,
            overdue=round(r.overdue, 3),
            since_renewal=None if r.since_renewal is None else round(r.since_renewal, 3),
        )
    if report.created:
        _log.info("fanned_out", batch=name, namespace=ns, jobs=len(report.created))
    if report.heals:
        _log.info("healed", batch=name, namespace=ns, heals=report.heals[:20])
    for conflict in report.conflicts:
        _log.warning("job_name_conflict", batch=name, namespace=ns, detail=conflict)
        if report.batch:
            event(ObjectRef("Batch", ns or "", name or ""), "Warning", "JobNameConflict", conflict)
    for error in report.errors:
        _log.warning("apply_error", batch=name, namespace=ns, error=error[:300])
