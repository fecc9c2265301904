"""The Batch status writer: writes a projection as the whole status, and knows its own writes.

`StatusWriter.write` writes a Batch's projected status whole (every field, absent ones as null)
without a resourceVersion: another client's change to the Batch (a label, the spec) cannot make
it fail, and no field keeps a value from an older write. It writes only what differs from its
`baseline`, and only while the replica is sure it leads. Each status carries the writer's leader
term, which the Batch CRD's rule on `status.operatorTerm` never lets go down: a replica that lost
the lead cannot overwrite its successor's status, even with a write already on its way. A status
written by anyone else (`observe`) makes the next write start from the server's status again.
Heals are counted, and their Events posted, only once the status recording them is written.

Not guaranteed: that a write lands. A refused or failed write leaves the items' marks; the next
tick writes again.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque

from recall.base import faults, log, metrics
from recall.kube import ApiError, Invalid, JobApi, NotFound, ObjectRef, RawObject
from recall.kube.patch import merge_patch
from recall.operator.peers.leader import Leadership
from recall.operator.reconcile.marks import Marks
from recall.operator.reconcile.project import CODE, Projection, stored_phases
from recall.operator.reconcile.record import BatchKey
from recall.operator.reconcile.report import PostEvent, Report
from recall.resources import Batch, BatchStatus, ItemPhase

_log = log.get("operator")
MAX_EVENTS = 20  # Events of one kind per apply; the rest are summed up in one more


def _ref(batch: Batch) -> ObjectRef:
    return ObjectRef(batch.kind, batch.namespace, batch.name, batch.metadata.uid)


def whole(status: BatchStatus, term: int | None) -> RawObject:
    """`status` as a body that replaces the stored one: every field, absent ones as null; the
    stored term kept where there is no term to write (the only replica)."""
    body = status.to_api()
    for name, info in BatchStatus.model_fields.items():
        body.setdefault(info.alias or name, None)
    if term is None:
        body.pop("operatorTerm", None)  # keep whatever is stored
    return body


class StatusWriter:
    """Writes Batch statuses for the leader, and remembers the statuses it wrote (with their
    resourceVersions) to tell its own writes from another's when the watch delivers them."""

    def __init__(self, store: JobApi, event: PostEvent) -> None:
        self.store = store
        self.event = event
        self.written: dict[BatchKey, BatchStatus] = {}
        self._versions: dict[BatchKey, deque[str]] = {}  # resourceVersions of our own writes
        self._statuses: dict[BatchKey, deque[RawObject]] = {}  # and the statuses they wrote
        self._lock = threading.Lock()  # `written` and `_versions`: kopf's thread reads them

    def observe(self, batch: Batch) -> bool:
        """A Batch as the watch delivered it. True when its status was written by someone else
        (another replica that thought it led): what this one wrote is then forgotten."""
        with self._lock:
            ours = self._versions.get(batch.key, ())
            written = self.written.get(batch.key)
            if written is None or batch.metadata.resource_version in ours:
                return False
            seen = batch.status.to_api()
            if any(seen == mine for mine in self._statuses.get(batch.key, ())):
                return False  # one of ours, delivered late (another client's change since)
            _log.info(
                "batch_status_foreign",
                batch=batch.name,
                namespace=batch.namespace,
                resource_version=batch.metadata.resource_version,
            )
            self._forget(batch.key)
            return True

    def baseline(self, batch: Batch) -> BatchStatus:
        """The Batch status as it is now: the last one this process wrote (the only writer
        while it leads), else the one read from the API server."""
        return self.written.get(batch.key, batch.status)

    def forget(self, key: BatchKey | None = None) -> None:
        """Drop what was written (for one Batch, or all after a change of leader)."""
        with self._lock:
            self._forget(key)

    def _forget(self, key: BatchKey | None = None) -> None:
        for memory in (self.written, self._versions, self._statuses):
            if key is None:
                memory.clear()
            else:
                memory.pop(key, None)

    def write(
        self,
        batch: Batch,
        proj: Projection,
        marks: Marks,
        upto: int,
        report: Report,
        leadership: Leadership,
    ) -> None:
        """Write `proj`, the projection of `batch`'s jobs, as its whole status (`batch.status`
        is the baseline). Marks up to `upto` are cleared once it is written, or when nothing
        differs; on failure they stay: the next tick writes again."""
        base = batch.status
        term = leadership.term
        # What the server would hold after the write: the term written, or (the only replica,
        # no term) whatever term is stored.
        status = proj.status.model_copy(
            update={"operator_term": base.operator_term if term is None else term}
        )
        if not merge_patch(base.to_api(), status.to_api()):
            marks.clear(batch.key, upto)
            return
        body = whole(status, term)
        done_before = base.counts.completed if base.counts else 0
        done_now = proj.status.counts.completed if proj.status.counts else 0
        faults.hit("operator-before-projection", completing=done_now > done_before)
        faults.pause("operator-pause-before-projection", batch=batch.name)
        if not leadership.holds():
            report.errors.append(f"write Batch {batch.name} status: not leading")
            return
        # A freeze here (after the check, before the write lands) is what the term is for.
        faults.pause("operator-pause-before-status-write", batch=batch.name)
        if not self._send(batch, status, body, term, report, leadership):
            return
        marks.clear(batch.key, upto)
        report.status_written = True
        metrics.BATCH_WRITES.inc()
        self._recorded(batch, proj, report)

    def _send(
        self,
        batch: Batch,
        status: BatchStatus,
        body: RawObject,
        term: int | None,
        report: Report,
        leadership: Leadership,
    ) -> bool:
        """The status write itself, recorded as ours under the lock: `observe` must see this
        write recorded, or not yet sent. True when it was written."""
        with self._lock:
            try:
                stored = self.store.patch_batch_status(batch.namespace, batch.name, None, body)
            except Invalid as e:
                report.errors.append(f"write Batch {batch.name} status: {e.message}")
                if "operatorTerm" in e.message:
                    self._term_refused(batch, leadership)
                return False
            except NotFound:
                self._forget(batch.key)
                return False
            except ApiError as e:
                report.errors.append(f"write Batch {batch.name} status: {e.message}")
                return False
            kept = term if term is not None else stored.status.operator_term
            self.written[batch.key] = status.model_copy(update={"operator_term": kept})
            mine = self._statuses.setdefault(batch.key, deque(maxlen=16))
            mine.append(self.written[batch.key].to_api())
            versions = self._versions.setdefault(batch.key, deque(maxlen=8))
            if stored.metadata.resource_version not in versions:
                versions.append(stored.metadata.resource_version or "")
        return True

    def _term_refused(self, batch: Batch, leadership: Leadership) -> None:
        """Our term is older than the stored one. A replica that lost the lead stops here; a
        leader (the Lease was made again and its count restarted) takes a higher term. Called
        with the lock held."""
        self._forget(batch.key)
        with contextlib.suppress(ApiError):
            fresh = self.store.get_batch(batch.namespace, batch.name)
            stored = fresh.status.operator_term if fresh is not None else None
            if stored is not None and leadership.holds():
                leadership.need_term(stored + 1)

    def _recorded(self, batch: Batch, proj: Projection, report: Report) -> None:
        """Count and announce what the written status recorded: heals, newly failed items."""
        if proj.heals:
            metrics.HEALS.labels(kind="item-phase").inc(len(proj.heals))
        report.heals = report.heals + [h.describe() for h in proj.heals]
        for text in report.heals[:MAX_EVENTS]:
            self.event(_ref(batch), "Normal", "Healed", text)
        if len(report.heals) > MAX_EVENTS:
            rest = len(report.heals) - MAX_EVENTS
            self.event(_ref(batch), "Normal", "Healed", f"and {rest} more items healed")
        before = stored_phases(batch.status, proj.status.counts.total if proj.status.counts else 0)
        failed = CODE[ItemPhase.FAILED]
        # the stored attention too: past a cut encoding an item reads queued (`known_below`)
        said = {a.index for a in batch.status.attention if a.phase is ItemPhase.FAILED}
        newly = [
            a
            for a in proj.status.attention
            if a.phase is ItemPhase.FAILED and before[a.index] != failed and a.index not in said
        ]
        for a in newly[:MAX_EVENTS]:
            text = f"item {a.key} failed: {a.reason}: {a.message or ''}"
            self.event(_ref(batch), "Warning", "Failed", text)
            if a.job:
                self.event(
                    ObjectRef("TranscriptionJob", batch.namespace, a.job),
                    "Warning",
                    "Failed",
                    f"{a.reason}: {a.message or ''}",
                )
