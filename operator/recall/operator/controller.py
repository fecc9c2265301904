"""The operator's controller: one loop that reclaims, reconciles and projects.

    controller = wire(store, settings, results=bucket)   # recall.operator.runtime.wiring
    controller.run_once()     # one tick; tests call it directly
    controller.run(stop)      # run_once until stop, waking at the next lease expiry or tick

Each tick plans (`reconcile.plan_batch`, pure) and applies (one `Applier`: job writes first,
then the Batch status) every unfinished Batch with a changed job, an expired lease or backoff,
or a full reconcile due (start-up, a new generation, every `reconcile_interval`). Jobs no
unfinished Batch covers go through the same plan without a Batch: every leased job has a
reclaim path.

A lease is reclaimed within one tick of its expiry on the operator's clock. Nothing raises out
of the loop: an error is logged and the next tick retries (DESIGN §5, invariant 9). Only the
leader (`leading`) acts and exports the per-Batch gauges (`reconcile.gauges`); a standby removes
its series, so no stale figures stand beside the leader's. A finished Batch's TTL deletes its
jobs here; its status no longer changes (Complete waits for every result to be published, then
freezes). Publishing and the store's garbage run on `results.publish.Results`'s own thread.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from recall.base import log, metrics
from recall.base.clock import SYSTEM, Clock
from recall.base.settings import OperatorSettings
from recall.kube import Api
from recall.operator.dispatch import Capacity, ReadyQueue, free_slots, pick_supported
from recall.operator.peers.registry import Registry
from recall.operator.reconcile.apply import CREATE_SECONDS, Applier
from recall.operator.reconcile.cache import JobCache, KnownBatches
from recall.operator.reconcile.gauges import BatchGauges
from recall.operator.reconcile.plan import BatchView, plan_batch, plan_jobs
from recall.operator.reconcile.record import BatchKey, JobRecord
from recall.operator.reconcile.report import Report, log_report
from recall.operator.reconcile.resolved import Resolver
from recall.operator.results.publish import Results
from recall.operator.results.retention import expire_finished, never
from recall.protocol.observer import next_expiry
from recall.resources import Batch
from recall.resources.errors import JobFailure

_log = log.get("operator")


def projection_interval(items: int, settings: OperatorSettings) -> float:
    """How often a Batch's changes are projected: every tick, and for big Batches (more than
    25,000 items) no more than their size allows at about a tenth of a core."""
    return max(settings.tick_seconds, items / 50_000)


class Signals:
    """The controller's wake-ups: made by the wiring, rung by the peers that see a change."""

    def __init__(self) -> None:
        self.wake = threading.Event()  # run the loop now
        self.dispatch_due = threading.Event()  # and offer work first

    def dispatch(self) -> None:
        """A job or a worker changed: someone may have become idle, or work ready."""
        self.dispatch_due.set()
        self.wake.set()


@dataclass(frozen=True)
class Peers:
    """What the controller acts through, each made once by `runtime.wiring.wire` and shared."""

    cache: JobCache  # every job, as compact records (the informer feeds it)
    ready: ReadyQueue
    registry: Registry
    results: Results  # publishing and the store's garbage, on its own thread
    applier: Applier  # the only writer of the controller's decisions
    batches: KnownBatches  # the Batches kopf delivered
    signals: Signals
    # Whether a finished Batch's TTL waits (its events are not settled: notify.state.holds)
    held: Callable[[Batch], bool] = never


class Controller:
    def __init__(
        self,
        store: Api,
        settings: OperatorSettings,
        peers: Peers,
        *,
        leading: threading.Event,
        clock: Clock = SYSTEM,
    ) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        self.cache = peers.cache
        self.ready = peers.ready
        self.registry = peers.registry
        self.results = peers.results
        self.applier = peers.applier
        self.held = peers.held
        # Set while this replica leads (the elector's event, shared by every loop that acts).
        self.leading = leading
        self._batches = peers.batches
        self._resolver = Resolver(store, self.applier.event)
        self._last_full: dict[BatchKey, float] = {}
        self._last_projection: dict[BatchKey, float] = {}
        self._lock = threading.Lock()
        self._wake = peers.signals.wake
        self._dispatch_due = peers.signals.dispatch_due
        self._last_tick = float("-inf")
        self._was_leading = False
        self._create_until = float("inf")
        self._ticks = 0
        # Batches the create budget left with jobs to create, and the tick it first did
        self._short: dict[BatchKey, int] = {}
        self._gauges = BatchGauges()

    # -- inputs ------------------------------------------------------------------------------

    def put_batch(self, batch: Batch) -> None:
        """A Batch as kopf saw it (created, changed, or listed)."""
        with self._lock:
            old = self._batches.put(batch)
            foreign = self.applier.status.observe(batch)
            if foreign or old is None or old.metadata.generation != batch.metadata.generation:
                self._last_full.pop(batch.key, None)  # reconcile it fully at the next tick
        self._wake.set()

    def forget_batch(self, key: BatchKey) -> None:
        with self._lock:
            self._batches.pop(key)
            self._resolver.forget(key)
            self._last_full.pop(key, None)
            self._last_projection.pop(key, None)
            self._short.pop(key, None)
        self.applier.status.forget(key)

    def wake(self) -> None:
        self._wake.set()

    def batches(self) -> dict[BatchKey, Batch]:
        with self._lock:
            return self._batches.snapshot()

    # -- the loop ----------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """run_once every tick (earlier when a lease expires); between ticks, offers as soon as
        a worker is idle. Never raises."""
        while not stop.is_set():
            wait = None
            try:
                if (
                    self.clock.monotonic() - self._last_tick >= self.settings.tick_seconds
                    or self._expiry_due()
                ):
                    self._last_tick = self.clock.monotonic()
                    self.run_once()
                elif self._dispatch_due.is_set():
                    self._dispatch_due.clear()
                    self.dispatch_once()
            except Exception:
                _log.exception("tick_failed")
                wait = self.settings.tick_seconds  # the API server is away: do not spin
            self.clock.wait(self._wake, self.next_wait() if wait is None else wait)
            self._wake.clear()

    def _expiry_due(self) -> bool:
        """A lease expired since the last tick looked (one that tick could not reclaim waits
        for the next tick, not for a hot loop)."""
        expiry = next_expiry(self.cache.observations(), after=self._last_tick)
        return expiry is not None and expiry <= self.clock.monotonic()

    def next_wait(self) -> float:
        """Seconds until the next tick or the next lease expiry, whichever comes first."""
        tick = max(0.0, self._last_tick + self.settings.tick_seconds - self.clock.monotonic())
        expiry = next_expiry(self.cache.observations(), after=self._last_tick)
        if expiry is None:
            return max(0.01, tick)
        return max(0.01, min(tick, expiry - self.clock.monotonic() + 0.001))

    def run_once(self, now_mono: float | None = None) -> list[Report]:
        """One tick: plan and apply for every Batch that needs it and for uncovered jobs."""
        if self.ready.ahead_seconds > 0:
            # every replica's cache listener times holds: forget the workers gone, leading or not
            alive = self.registry.alive(self.clock.monotonic())
            self.ready.keep_workers({w.key for w in alive})
        if not self.leading.is_set() or not self.cache.synced.is_set():
            self._was_leading = False
            self._gauges.export({})  # only the leader's figures are current
            return []
        if not self._was_leading:
            # A new term: another replica may have written meanwhile; start from the server's.
            self.applier.status.forget()
            self._was_leading = True
        mono = self.clock.monotonic() if now_mono is None else now_mono
        started = self.clock.monotonic()
        leases, backoffs = self.cache.observations(), self.cache.backoffs()
        dirty = self.cache.marks.dirty()
        with self._lock:
            batches = self._batches.snapshot()
        watched = self._watched(batches)
        reports = []
        if watched.get(None):
            # Jobs no Batch covers first: their reclaims must not wait behind fan-outs.
            plan = plan_jobs(watched[None], mono, leases, backoffs)
            if plan.job_writes:
                uncovered = Report(None)
                self.applier.apply_jobs(plan, self.clock.now(), mono, uncovered)
                reports.append(uncovered)
        reports += self._reconcile_batches(batches, watched, dirty, mono)
        self._after_tick(reports, batches, mono, started)
        return reports

    def _watched(
        self, batches: Mapping[BatchKey, Batch]
    ) -> defaultdict[BatchKey | None, list[JobRecord]]:
        """The cache's watched jobs by covering Batch; None: no known Batch, or no item."""
        watched: defaultdict[BatchKey | None, list[JobRecord]] = defaultdict(list)
        for r in self.cache.watched():
            covered = r.batch_key in batches and r.index is not None
            watched[r.batch_key if covered else None].append(r)
        return watched

    def _reconcile_batches(
        self,
        batches: Mapping[BatchKey, Batch],
        watched: Mapping[BatchKey | None, list[JobRecord]],
        dirty: set[BatchKey],
        mono: float,
    ) -> list[Report]:
        """Plan and apply for every Batch that needs it, in the order the create budget asks."""
        # One create budget per tick for all Batches: a fan-out holds the next Batch's reclaims
        # back by at most CREATE_SECONDS. Smaller Batches first, so a small one behind a big
        # fan-out starts at once; every other tick the Batches left short go first, longest
        # waiting first, so a stream of small Batches cannot starve a big fan-out.
        self._create_until = self.clock.monotonic() + CREATE_SECONDS
        order = sorted(batches.items(), key=lambda kv: self._resolver.size_hint(kv[1]))
        self._ticks += 1
        if self._ticks % 2 == 0:
            order.sort(key=lambda kv: self._short.get(kv[0], float("inf")))
        reports = []
        for key, batch in order:
            last = self._last_full.get(key)
            full = last is None or mono - last >= self.settings.reconcile_interval
            # A complete Batch is frozen. Only a foreign write or a new generation is projected
            # over, and only while its jobs exist (after the TTL the status stays as it is).
            if (
                batch.status.complete
                and not watched.get(key)
                and (key in self._last_full or not self.cache.has_batch(key))
            ):
                continue
            if not full and key not in dirty and key not in watched:
                continue
            report = self._reconcile(
                batch, watched.get(key, []), mono, full=full, dirty=key in dirty
            )
            if report is not None:
                reports.append(report)
                if report.more:
                    self._short.setdefault(key, self._ticks)
                else:
                    self._short.pop(key, None)
        return reports

    def _after_tick(
        self,
        reports: Sequence[Report],
        batches: dict[BatchKey, Batch],
        mono: float,
        started: float,
    ) -> None:
        """What follows the applies: suspects, offers, TTL, results, logs, gauges."""
        for report in reports:
            for namespace, worker in report.expired_holders:
                # Dead or cut off: offer it nothing until it renews its registration (else
                # the next offer waits out offer_seconds).
                self.registry.suspect(namespace, worker)
        self.dispatch_once(mono)
        expire_finished(
            self.store, self.cache, self.applier.event, batches, self.clock.now(), self.held
        )
        self.results.wake()
        for report in reports:
            log_report(report, self.applier.event)
        for phase, n in self.cache.phase_counts.items():
            metrics.JOBS.labels(phase=phase).set(n)
        self._gauges.export(self.batches())  # those of every other Batch removed
        metrics.TICK_SECONDS.observe(self.clock.monotonic() - started)

    def dispatch_once(self, now_mono: float | None = None) -> int:
        """Withdraw stale offers, then offer claimable jobs to free slots; the offers written."""
        if (
            not self.settings.dispatch
            or not self.leading.is_set()
            or not self.cache.synced.is_set()
        ):
            return 0
        mono = self.clock.monotonic() if now_mono is None else now_mono
        alive = self.registry.offerable(mono)  # a worker asked to drain is offered nothing
        keys = {w.key for w in alive}
        for stale in self.ready.stale_offers(mono, self.settings.offer_seconds, keys):
            offered = self.cache.get(stale)
            if offered is not None:
                self.ready.expired(stale, mono, self.settings.offer_seconds, keys)
                self.applier.withdraw(offered)
        workers = [
            Capacity(w.key, w.engine, w.pool, w.slots, w.multilingual, w.model) for w in alive
        ]
        for key in self.ready.ahead_offers({w.key: w.slots for w in workers}):
            # An offer ahead waits for its worker: a more urgent job must not wait behind it.
            offered = self.cache.get(key)
            if offered is None:
                continue
            top = self.ready.top_priority((key[0], offered.pool, offered.engine))
            if top is not None and top > offered.priority:
                self.applier.withdraw(offered)
        # judged on every live worker: one offered nothing may yet be the multilingual one
        judged = [
            Capacity(w.key, w.engine, w.pool, w.slots, w.multilingual, w.model)
            for w in self.registry.alive(mono)
        ]
        return self._offer(workers, judged, mono)

    def _offer(self, workers: list[Capacity], judged: list[Capacity], mono: float) -> int:
        """Offer claimable jobs to the free slots of `workers` (what none of `judged` can do
        is rejected); the offers written. A job whose offer or reject write failed is put back
        in the queue."""
        written, missed = 0, []

        def reject(record: JobRecord, failure: JobFailure) -> None:
            if not self.applier.reject(record, failure):
                missed.append(record.key)

        for w in free_slots(workers, self.ready, mono):
            # what no live worker of its lane can do is failed, unleased, instead (dispatch)
            record = pick_supported(self.ready, w, judged, self.cache.get, reject)
            if record is None:
                continue
            if self.applier.offer(record, w.key[1]):
                self.ready.offered_to(record.key, w.key)
                written += 1
            else:
                missed.append(record.key)
        for key in missed:
            # a write that failed brings no watch event (a 409 does: this is then a no-op or
            # the newer version); after this pass, so one job is not tried for every slot
            current = self.cache.get(key)
            if current is not None:
                self.ready.requeue(current)
        return written

    def _reconcile(
        self, batch: Batch, watched: Sequence[JobRecord], mono: float, *, full: bool, dirty: bool
    ) -> Report | None:
        resolved = self._resolver.items(batch)
        batch = batch.model_copy(update={"status": self.applier.status.baseline(batch)})
        leases, backoffs = self.cache.observations(), self.cache.backoffs()
        if not full and not plan_jobs(watched, mono, leases, backoffs).job_writes:
            # Only changes to project: a big Batch is projected less often than every tick
            # (one projection of 100,000 items costs about 0.1 s).
            last = self._last_projection.get(batch.key, float("-inf"))
            interval = projection_interval(len(resolved.items), self.settings)
            if not dirty or (interval > self.settings.tick_seconds and mono - last < interval):
                return None
        upto = self.cache.marks.seq()  # before the jobs, and the changes after: see apply_batch
        by_key = self.cache.batch_jobs(batch.key)
        jobs = {r.index: r for r in by_key.values() if r.index is not None}
        seen = (self.cache.marks.moved(batch.key), upto)
        self._last_projection[batch.key] = mono
        view = BatchView(
            batch, resolved.items, jobs, watched, leases, backoffs, mono, seen, resolved.invalid
        )
        plan = plan_batch(
            view, full=full, dirty=dirty, max_creates=self.settings.max_creates_per_tick
        )
        if not plan.project and not plan.job_writes:
            if full:
                self._last_full[batch.key] = mono
            return None
        report = self.applier.apply_batch(
            plan, self.cache.marks, now=self.clock.now(), create_until=self._create_until
        )
        if full and not plan.more and not report.more:
            self._last_full[batch.key] = mono
        return report

    # -- deletion ----------------------------------------------------------------------------

    def cancel_batch(self, batch: Batch) -> int:
        """A deleted Batch: `Applier.cancel` its jobs, then forget it; how many were cancelled."""
        now = self.clock.now()
        cancelled = self.applier.cancel(batch, self.cache.batch_jobs(batch.key).values(), now)
        self.forget_batch(batch.key)
        if batch.metadata.uid:
            self.results.forget_batch(batch.namespace, batch.name, batch.metadata.uid)
        return cancelled
