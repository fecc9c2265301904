"""The operator's kopf handlers: thin, each calling the pure core and one I/O step.

What runs where (all of it pauses while a higher-priority peer is active, because kopf pauses
watches, indexes and timers together):

- `job_index` (a `kopf.index` of jobs by batch) is called on every watch event of a job. It
  records when each lease's renewal was first observed (`LeaseClock`, our monotonic clock),
  which items changed since the last projection, and requests a reconcile when a claim or a
  completion is observed. Nothing is written here.
- `batch_tick` (a `kopf.timer` per unfinished Batch, every `tick_seconds`; a Batch whose
  Complete condition is True has none): reclaims expired leases of the
  Batch's jobs (fenced job write, then the item write in the same handler), then writes the
  projection if any of its jobs changed (coalesced: one write per tick at most), and
  reconciles — fans out missing jobs, heals items, syncs the suspend labels — on the first
  tick after start-up, when requested, and every `reconcile_interval`.
- `job_lease_expired` (a `kopf.timer` on batch-less jobs only while they are Leased): the
  reclaim for jobs without a Batch. The number of such timers is bounded by the number of
  workers (one lease each).
- `batch_delete`: cancels the Batch's jobs (fenced) and deletes them, without waiting for a
  garbage collector.
- `batch_suspend`: labels the Batch's jobs `recall.dev/suspended=true` (workers' queues select
  them out) or removes the label.

Every API call is a blocking call of `recall.kube` run in a thread.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import time
from collections import defaultdict
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from recall import faults, lease, log, metrics
from recall.fanout import job_for_item
from recall.kube import MERGE_PATCH, Kube, Written, fenced_write, merge_patch
from recall.models import (
    BATCH_PLURAL,
    GROUP,
    JOB_PLURAL,
    LABEL_SUSPENDED,
    VERSION,
    Batch,
    BatchStatus,
    ItemPhase,
    Phase,
    TranscriptionJob,
)
from recall.projection import missing_jobs, project
from recall.reaper import LeaseClock, decide, key_of, reclaim_job
from recall.settings import OperatorSettings

BatchKey = tuple[str, str]  # (namespace, batch name)
JobIndex = kopf.Index[BatchKey, "TranscriptionJob"]
_log = log.get("operator")


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclasses.dataclass
class OperatorState:
    """In-memory state of one operator process (lost on restart, by design: see reaper)."""

    kube: Kube
    settings: OperatorSettings
    clock: LeaseClock = dataclasses.field(default_factory=LeaseClock)
    seen: dict[str, tuple[str, Phase]] = dataclasses.field(
        default_factory=dict
    )  # uid → (rv, phase)
    changed: defaultdict[BatchKey, set[str]] = dataclasses.field(
        default_factory=lambda: defaultdict(set)
    )
    reconcile_due: set[BatchKey] = dataclasses.field(default_factory=set)
    last_reconcile: dict[BatchKey, float] = dataclasses.field(default_factory=dict)
    phase_counts: defaultdict[Phase, int] = dataclasses.field(
        default_factory=lambda: defaultdict(int)
    )

    def track(self, job: TranscriptionJob, now_monotonic: float) -> None:
        """Book-keeping for one observed version of a job (see the module docstring)."""
        uid = job.metadata.uid or f"{job.namespace}/{job.name}"
        rv = job.metadata.resource_version or ""
        phase = job.status.effective_phase
        previous = self.seen.get(uid)
        self.seen[uid] = (rv, phase)
        self.clock.observe(job, now_monotonic)
        if previous is None or previous[1] != phase:
            if previous is not None:
                self.phase_counts[previous[1]] -= 1
                metrics.JOBS.labels(phase=previous[1]).set(self.phase_counts[previous[1]])
            self.phase_counts[phase] += 1
            metrics.JOBS.labels(phase=phase).set(self.phase_counts[phase])
        batch, item = job.spec.batch_ref, job.spec.item
        if not batch or not item or previous is None or previous[0] == rv:
            return
        key = (job.namespace, batch)
        self.changed[key].add(item)
        if previous[1] != phase and (phase is Phase.LEASED or phase.terminal):
            self.reconcile_due.add(key)

    def forget(self, job: TranscriptionJob) -> None:
        uid = job.metadata.uid or f"{job.namespace}/{job.name}"
        previous = self.seen.pop(uid, None)
        if previous is not None:
            self.phase_counts[previous[1]] -= 1
            metrics.JOBS.labels(phase=previous[1]).set(self.phase_counts[previous[1]])
        self.clock.forget(key_of(job))
        if job.spec.batch_ref:
            self.reconcile_due.add((job.namespace, job.spec.batch_ref))


def _state(memo: Any) -> OperatorState:
    state: OperatorState = memo.state
    return state


def _jobs_of(index: JobIndex | None, key: BatchKey) -> dict[str, TranscriptionJob]:
    """The Batch's jobs by item key, from the index (kopf passes it to every handler)."""
    assert index is not None, "kopf passes the job index to every handler"
    out: dict[str, TranscriptionJob] = {}
    for job in index.get(key, []):
        if job.spec.item:
            out[job.spec.item] = job
    return out


def _event_ref(obj: TranscriptionJob | Batch) -> kopf.Body:
    """The part of an object kopf needs to post an Event about it."""
    return kopf.Body(
        {
            "apiVersion": obj.api_version,
            "kind": obj.kind,
            "metadata": {
                "name": obj.name,
                "namespace": obj.namespace,
                "uid": obj.metadata.uid or "",
            },
        }
    )


# --- Batch status I/O -------------------------------------------------------------------


def write_batch_status(
    kube: Kube,
    namespace: str,
    name: str,
    status: BatchStatus,
    stored: dict[str, Any],
    resource_version: str,
) -> bool:
    """Merge-patch the difference to `status`, guarded by the version it was computed from.

    Returns False when there was nothing to write or another writer got there first (409).
    """
    patch = merge_patch(stored, status.to_api())
    if not patch:
        return False
    try:
        kube.custom.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            namespace,
            BATCH_PLURAL,
            name,
            {"metadata": {"resourceVersion": resource_version}, "status": patch},
            _content_type=MERGE_PATCH,
            _request_timeout=15,
        )
    except ApiException as e:
        if e.status in (404, 409):
            return False
        raise
    metrics.BATCH_WRITES.inc()
    return True


@dataclasses.dataclass(frozen=True)
class ReconcileReport:
    written: bool
    heals: list[str]
    created: list[str]
    failed: dict[str, str] = dataclasses.field(default_factory=dict)  # item key → message
    conflicts: list[str] = dataclasses.field(default_factory=list)


def reconcile_batch(
    kube: Kube,
    namespace: str,
    name: str,
    jobs: dict[str, TranscriptionJob],
    changed: set[str],
    *,
    full: bool,
) -> ReconcileReport:
    """Read the Batch, create missing jobs (when `full`), write its projection. Blocking.

    `jobs` maps item keys to the jobs as indexed; `changed` are the items whose jobs changed
    since the last projection (their differences are updates, not heals).
    """
    fresh = kube.get_batch(namespace, name)
    if fresh is None or fresh["metadata"].get("deletionTimestamp"):
        return ReconcileReport(False, [], [], {})
    batch = Batch.from_api(fresh)
    stored_raw: dict[str, Any] = fresh.get("status") or {}
    stored = BatchStatus.model_validate(stored_raw)
    heals: list[str] = []
    created: list[str] = []
    conflicts: list[str] = []
    if full:
        fanned_out = bool(stored.items)
        for item in missing_jobs(batch, jobs):
            recorded = stored.items.get(item.key)
            if recorded is not None and recorded.phase.terminal:
                continue  # a finished item's job was deleted on purpose: do not run it again
            manifest = job_for_item(batch, item)
            try:
                obj = kube.create_job(batch.namespace, manifest)
            except ApiException as e:
                if e.status != 409:
                    raise
                # Created before (a retried handler; the index catches up), or the name is
                # taken by a job that is not this Batch's: say so, do not touch it.
                existing = kube.get_job(batch.namespace, manifest["metadata"]["name"])
                if existing is not None and existing.spec.batch_ref != batch.name:
                    conflicts.append(
                        f"item {item.key}: a TranscriptionJob named {existing.name} exists and "
                        f"belongs to {existing.spec.batch_ref or 'no Batch'}"
                    )
                continue
            job = TranscriptionJob.from_api(obj)
            jobs[item.key] = job
            created.append(job.name)
            if fanned_out:
                heals.append(f"job for item {item.key} was missing; created {job.name}")
                metrics.HEALS.labels(kind="job-missing").inc()
        _sync_suspend(kube, batch, jobs)
        _fail_exhausted(kube, jobs)
    result = project(batch, jobs, stored, utcnow(), changed, recreated=len(heals))
    for h in result.heals:
        heals.append(h.describe())
        metrics.HEALS.labels(kind=h.kind).inc()
    status = result.status
    newly = {
        key: after
        for key, after in result.status.items.items()
        if after.phase.terminal
        and (stored.items.get(key) is None or stored.items[key].phase != after.phase)
    }
    faults.hit(
        "operator-before-projection",
        completing=any(i.phase is ItemPhase.COMPLETED for i in newly.values()),
    )
    written = write_batch_status(
        kube,
        batch.namespace,
        batch.name,
        status,
        stored_raw,
        fresh["metadata"]["resourceVersion"],
    )
    failed = {
        k: i.message or "" for k, i in newly.items() if written and i.phase is ItemPhase.FAILED
    }
    return ReconcileReport(written, heals, created, failed, conflicts)


def _sync_suspend(kube: Kube, batch: Batch, jobs: dict[str, TranscriptionJob]) -> None:
    for job in jobs.values():
        if job.suspended != batch.spec.suspend and not job.status.effective_phase.terminal:
            set_suspended(kube, job.namespace, job.name, batch.spec.suspend)


def set_suspended(kube: Kube, namespace: str, name: str, suspended: bool) -> None:
    try:
        kube.custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            JOB_PLURAL,
            name,
            {"metadata": {"labels": {LABEL_SUSPENDED: "true" if suspended else None}}},
            _content_type=MERGE_PATCH,
            _request_timeout=15,
        )
    except ApiException as e:
        if e.status != 404:
            raise


def _fail_exhausted(kube: Kube, jobs: dict[str, TranscriptionJob]) -> None:
    """A Queued job without attempts left can never be claimed: mark it Failed."""
    for job in jobs.values():
        if (
            job.status.effective_phase is Phase.QUEUED
            and lease.attempts_left(job.status, job.spec.max_attempts) <= 0
        ):
            fenced_write(
                kube,
                job.namespace,
                job.name,
                lambda j: lease.exhaust(j.status, utcnow(), max_attempts=j.spec.max_attempts),
                known=job,
                action="exhaust",
            )


# --- registration -----------------------------------------------------------------------


def batch_unfinished(status: kopf.Status, **_: Any) -> bool:
    """A Batch whose Complete condition is not True: it still needs its timer."""
    return not BatchStatus.model_validate(dict(status)).complete


def register(registry: kopf.OperatorRegistry, settings: OperatorSettings, kube: Kube) -> None:
    """Register every handler on `registry` with the intervals from `settings`."""

    @kopf.on.startup(id="operator_startup", registry=registry)
    async def operator_startup(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
        settings.persistence.finalizer = "recall.dev/operator"
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="recall.dev")
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix="recall.dev", key="last-handled-configuration"
        )
        settings.posting.level = 30  # only kopf's own warnings become Events
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        settings.watching.connect_timeout = 10
        settings.networking.request_timeout = 30
        # kopf waits this long for more events of an object before handling it; the lease
        # clock starts when the index sees a renewal, so keep the wait short.
        settings.batching.batch_window = 0.02
        if opsettings.namespace:
            # One namespace and known resources: nothing to discover. Scanning would list
            # namespaces and CRDs cluster-wide, which a namespaced Role rightly forbids.
            settings.scanning.disabled = True
        settings.peering.lifetime = opsettings.peering_lifetime
        memo.state = OperatorState(kube=kube, settings=opsettings)
        _log.info(
            "operator_started",
            namespace=opsettings.namespace or "*",
            peering=opsettings.peering,
            priority=opsettings.priority,
        )

    opsettings = settings

    @kopf.on.login(id="login", registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    @kopf.index(GROUP, VERSION, JOB_PLURAL, id="job_index", registry=registry)
    def job_index(body: kopf.Body, memo: Any, **_: Any) -> dict[BatchKey, TranscriptionJob]:
        job = TranscriptionJob.from_api(dict(body))
        _state(memo).track(job, time.monotonic())
        return {(job.namespace, job.spec.batch_ref or ""): job}

    @kopf.on.event(GROUP, VERSION, JOB_PLURAL, id="job_event", registry=registry)
    def job_event(type: str, body: kopf.Body, memo: Any, **_: Any) -> None:
        if type == "DELETED":
            _state(memo).forget(TranscriptionJob.from_api(dict(body)))

    @kopf.timer(
        GROUP,
        VERSION,
        BATCH_PLURAL,
        id="batch_tick",
        interval=settings.tick_seconds,
        when=batch_unfinished,
        registry=registry,
    )
    async def batch_tick(
        body: kopf.Body, memo: Any, job_index: JobIndex | None = None, **_: Any
    ) -> None:
        state = _state(memo)
        batch = Batch.from_api(dict(body))
        if batch.metadata.deletion_timestamp:
            return
        key = (batch.namespace, batch.name)
        jobs = _jobs_of(job_index, key)
        await _reclaim(state, jobs.values(), batch)

        now = time.monotonic()
        last = state.last_reconcile.get(key)
        full = (
            last is None
            or key in state.reconcile_due
            or now - last >= state.settings.reconcile_interval
        )
        changed = state.changed.get(key, set())
        if not full and not changed:
            return
        state.changed.pop(key, None)
        state.reconcile_due.discard(key)
        jobs = _jobs_of(job_index, key)  # reclaims may have changed some
        report = await asyncio.to_thread(
            reconcile_batch, state.kube, batch.namespace, batch.name, jobs, changed, full=full
        )
        if full:
            state.last_reconcile[key] = now
        if report.heals:
            _log.info("healed", batch=batch.name, namespace=batch.namespace, heals=report.heals)
            kopf.event(
                _event_ref(batch),
                type="Normal",
                reason="Healed",
                message="; ".join(report.heals)[:1000],
            )
        for item, message in report.failed.items():
            job = jobs.get(item)
            text = f"item {item} failed: {message}"
            kopf.event(_event_ref(batch), type="Warning", reason="Failed", message=text[:1000])
            if job is not None:
                kopf.event(_event_ref(job), type="Warning", reason="Failed", message=message[:1000])
        for conflict in report.conflicts:
            _log.warning(
                "job_name_conflict", batch=batch.name, namespace=batch.namespace, detail=conflict
            )
            kopf.event(
                _event_ref(batch), type="Warning", reason="JobNameConflict", message=conflict[:1000]
            )
        if report.created and not report.heals:
            _log.info(
                "fanned_out", batch=batch.name, namespace=batch.namespace, jobs=len(report.created)
            )

    async def _reclaim(state: OperatorState, jobs: Any, batch: Batch | None) -> None:
        """Reclaim every expired lease among `jobs` (fenced job writes), then write their
        items back in one Batch write, in this same handler."""
        jobs = list(jobs)
        decisions = decide(
            state.clock, [j for j in jobs if j.status.phase is Phase.LEASED], time.monotonic()
        )
        reclaimed: dict[str, TranscriptionJob] = {}
        for d in decisions:
            outcome = await asyncio.to_thread(
                reclaim_job, state.kube, d, now=utcnow(), now_monotonic=time.monotonic()
            )
            if not outcome.reclaimed:
                continue
            job = outcome.job
            holder = d.job.status.lease.holder if d.job.status.lease else "?"
            message = (
                f"lease of {holder} expired; job is {outcome.reason} "
                f"(attempt {job.status.attempts}, {job.status.expired_leases} expired)"
            )
            kopf.event(_event_ref(job), type="Warning", reason="Reclaimed", message=message)
            if batch is not None and job.spec.item:
                reclaimed[job.spec.item] = job
                kopf.event(
                    _event_ref(batch),
                    type="Warning",
                    reason="Reclaimed",
                    message=f"item {job.spec.item}: {message}",
                )
        if batch is None or not reclaimed:
            return
        faults.hit("operator-after-reclaim-write", batch=batch.name)
        current = {j.spec.item: j for j in jobs if j.spec.item} | reclaimed
        await asyncio.to_thread(
            reconcile_batch,
            state.kube,
            batch.namespace,
            batch.name,
            current,
            set(reclaimed),
            full=False,
        )

    def leased_without_batch(spec: kopf.Spec, status: kopf.Status, **_: Any) -> bool:
        return status.get("phase") == "Leased" and not spec.get("batchRef")

    @kopf.timer(
        GROUP,
        VERSION,
        JOB_PLURAL,
        id="job_lease_expired",
        interval=settings.tick_seconds,
        when=leased_without_batch,
        registry=registry,
    )
    async def job_lease_expired(body: kopf.Body, memo: Any, **_: Any) -> None:
        await _reclaim(_state(memo), [TranscriptionJob.from_api(dict(body))], None)

    @kopf.on.delete(GROUP, VERSION, BATCH_PLURAL, id="batch_delete", registry=registry)
    async def batch_delete(
        body: kopf.Body, memo: Any, job_index: JobIndex | None = None, **_: Any
    ) -> None:
        state = _state(memo)
        batch = Batch.from_api(dict(body))
        jobs = list(_jobs_of(job_index, (batch.namespace, batch.name)).values())
        cancelled = await asyncio.to_thread(
            cancel_jobs, state.kube, jobs, f"Batch {batch.name} was deleted"
        )
        _log.info(
            "batch_deleted",
            batch=batch.name,
            namespace=batch.namespace,
            jobs=len(jobs),
            cancelled=cancelled,
        )

    @kopf.on.field(
        GROUP, VERSION, BATCH_PLURAL, id="batch_suspend", field="spec.suspend", registry=registry
    )
    async def batch_suspend(
        body: kopf.Body, memo: Any, new: Any, job_index: JobIndex | None = None, **_: Any
    ) -> None:
        state = _state(memo)
        batch = Batch.from_api(dict(body))
        jobs = _jobs_of(job_index, (batch.namespace, batch.name))
        await asyncio.to_thread(_sync_suspend, state.kube, batch, jobs)
        state.reconcile_due.add((batch.namespace, batch.name))
        _log.info(
            "batch_suspended" if new else "batch_resumed",
            batch=batch.name,
            namespace=batch.namespace,
            jobs=len(jobs),
        )


def cancel_jobs(kube: Kube, jobs: list[TranscriptionJob], message: str) -> int:
    """Cancel (fenced) every non-terminal job, then delete them all; returns how many cancelled."""
    cancelled = 0
    for job in jobs:
        result = fenced_write(
            kube,
            job.namespace,
            job.name,
            lambda j: lease.cancel(j.status, utcnow(), reason="BatchDeleted", message=message),
            known=job,
            action="cancel",
        )
        cancelled += isinstance(result, Written)
    for job in jobs:
        try:
            kube.custom.delete_namespaced_custom_object(
                GROUP,
                VERSION,
                job.namespace,
                JOB_PLURAL,
                job.name,
                propagation_policy="Background",
                _request_timeout=15,
            )
        except ApiException as e:
            if e.status != 404:
                raise
    return cancelled
