"""The operator's kopf handlers: each a few lines, handing over to the `Controller`.

- `operator_startup` configures kopf and starts `Runtime` on threads: the informers, the
  leader elector (when enabled), the controller, results, notify and usage loops, the workers'
  autoscaling when configured (`scaling.service`) and `/readyz`; `operator_cleanup` stops them.
- `batch_event` keeps the controller's Batches current (kopf watches Batches; jobs are watched
  by the informer, which scales to 100,000 of them).
- `batch_delete` waits for the Batch's events, then cancels its leased jobs and deletes its
  jobs, before kopf removes its finalizer.

kopf runs in every replica (standalone); only the elected leader's controller acts.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Iterator
from typing import Any

import kopf

from recall.base import log, metrics
from recall.base.backoff import Backoff
from recall.base.clock import SYSTEM, Clock
from recall.base.settings import OperatorSettings
from recall.bucket import Stores
from recall.kube import Api
from recall.kube.informer import Informer, Selection
from recall.operator.notify.notifier import Notifier
from recall.operator.notify.settings import NotifySettings
from recall.operator.notify.state import holds
from recall.operator.peers.leader import LeaderElector
from recall.operator.runtime import readiness
from recall.operator.runtime.wiring import wire
from recall.operator.scaling.service import Autoscaling
from recall.operator.scaling.workload import Workload
from recall.operator.usage import Usage
from recall.protocol.workers import SELECTOR
from recall.resources import BATCH_PLURAL, GROUP, VERSION, Batch

_log = log.get("operator")


class Runtime:
    """What one operator process runs beside kopf: informer, elector, controller loop."""

    def __init__(
        self, store: Api, settings: OperatorSettings, stores: Stores, clock: Clock = SYSTEM
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.stop = threading.Event()
        self.elector: LeaderElector | None = None  # None: leader election is off
        if settings.leader_election:
            self.elector = LeaderElector(
                store,
                settings.leader_election_namespace or settings.namespace or "default",
                settings.leader_election_name,
                settings.identity,
                lease_duration=settings.lease_duration,
                renew_deadline=settings.renew_deadline,
                retry_period=settings.retry_period,
            )
        # One leadership for every loop: the controller's, the results', the autoscaler's.
        leading = self.elector.leading if self.elector is not None else threading.Event()
        notify = NotifySettings()
        self.controller = wire(
            store,
            settings,
            results=stores.results(),
            stores=stores,
            leading=leading,
            leadership=self.elector,
            clock=clock,
            held=functools.partial(holds, defaults=notify.default_sinks),
        )
        # Events out, on their own thread: a sink never holds the controller or a job.
        self.notifier = Notifier(
            store,
            self.controller.cache,
            leading=leading,
            batches=self.controller.batches,
            settings=notify,
            clock=clock,
        )
        self.usage = Usage(store, self.controller.cache, leading=leading, clock=clock)
        if self.elector is None:
            leading.set()
        self.informer = Informer(
            Selection.jobs(store, settings.namespace), self.controller.cache, name="job-informer"
        )
        self.registrations = Informer(
            Selection.leases(store, settings.namespace, SELECTOR),
            self.controller.registry,
            name="registrations",
        )
        self.threads: list[threading.Thread] = []
        workload = Workload()
        self.controller.cache.listeners.append(workload.update)
        self.autoscaling = Autoscaling(
            store,
            settings,
            workload,
            self.controller.registry,
            self.controller.ready.busy,
            self.elector,
            jobs=self.informer,
            registrations=self.registrations,
        )

    def start(self) -> None:
        self._spawn("job-informer", self.informer.run, reader=True)
        if self.settings.dispatch:
            self._spawn("registrations", self.registrations.run, reader=True)
        if self.elector is not None:
            self._spawn("leader-elector", self.elector.run)
        self._spawn("controller", self.controller.run)
        self.autoscaling.start(self._spawn)
        self._spawn("results", self.controller.results.run)
        self._spawn("notify", self.notifier.run)
        self._spawn("usage", self.usage.run)
        self._spawn("leader-gauge", self._gauge)
        readiness.serve(self.settings.health_port, self.ready)

    def ready(self) -> str | None:
        """Why this replica is not ready, or None."""
        if not self.controller.cache.synced.is_set():
            return "the job cache is not synced yet"
        if self.controller.results.reachable is not None:
            return f"the results store: {self.controller.results.reachable}"
        return None

    def _spawn(self, name: str, target: Any, *, reader: bool = False) -> None:
        """Start `target(stop)` on a daemon thread. A stop waits for the writers; a reader
        (an informer, blocked in a watch until the server ends it) is left to the exit."""
        thread = threading.Thread(target=target, args=(self.stop,), name=name, daemon=True)
        thread.start()
        if not reader:
            self.threads.append(thread)

    def _gauge(self, stop: threading.Event) -> None:
        while not self.clock.wait(stop, 1.0):
            metrics.LEADER.set(1 if self.controller.leading.is_set() else 0)

    def shutdown(self) -> None:
        self.stop.set()
        self.autoscaling.stop()
        self.controller.wake()
        self.controller.results.wake()
        self.notifier.wake()
        deadline = self.clock.monotonic() + 10  # one deadline for the writers: 10 s at most
        for thread in self.threads:
            thread.join(timeout=max(0.0, deadline - self.clock.monotonic()))
        late = [t.name for t in self.threads if t.is_alive()]
        if late:
            _log.warning("threads_not_stopped", threads=late)


def _runtime(memo: Any) -> Runtime:
    runtime: Runtime = memo.runtime
    return runtime


# kopf's error backoffs (its own are 1, 1, 2, 3, 5, 8, 13, 21 s), each stretched by a fresh
# random 0-50 %: never sooner than the backoff nor a 429's Retry-After (APF's: 1 s; kopf takes
# the longer), and processes turned away together do not come back together.
KOPF_BACKOFF = Backoff(initial=1.0, factor=1.6, cap=21.0, jitter=0.5, steps=8)


class JitteredBackoffs:
    """A `Backoff` as kopf's `error_backoffs`: a sized iterable, jittered afresh at every use."""

    def __init__(self, backoff: Backoff) -> None:
        assert backoff.steps is not None, "kopf needs a bounded number of backoffs"
        self.backoff = backoff

    def __len__(self) -> int:
        return self.backoff.steps or 0

    def __iter__(self) -> Iterator[float]:
        return self.backoff.delays()


def configure_kopf(kopf_settings: kopf.OperatorSettings, settings: OperatorSettings) -> None:
    """kopf's own settings: our finalizer and annotations, and a diff-base without the items."""
    kopf_settings.persistence.finalizer = "recall.dev/operator"
    kopf_settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix="recall.dev"
    )
    # The items are immutable and may be many: the diff-base annotation must not copy them.
    kopf_settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="recall.dev",
        key="last-handled-configuration",
        ignored_fields=["spec.items", "spec.itemsFrom"],
    )
    kopf_settings.posting.level = 30  # only kopf's own warnings become Events
    kopf_settings.watching.server_timeout = 300
    kopf_settings.watching.client_timeout = 330
    kopf_settings.watching.connect_timeout = 10
    kopf_settings.networking.request_timeout = 30
    kopf_settings.networking.error_backoffs = JitteredBackoffs(KOPF_BACKOFF)
    if settings.namespace:
        # One namespace and known resources: nothing to discover. Scanning would list
        # namespaces and CRDs cluster-wide, which a namespaced Role rightly forbids.
        kopf_settings.scanning.disabled = True


def register(
    registry: kopf.OperatorRegistry, settings: OperatorSettings, store: Api, stores: Stores
) -> None:
    """Register the handlers on `registry`."""

    @kopf.on.startup(id="operator_startup", registry=registry)
    async def operator_startup(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
        configure_kopf(settings, opsettings)
        memo.runtime = Runtime(store, opsettings, stores)
        memo.runtime.start()
        _log.info(
            "operator_started",
            namespace=opsettings.namespace or "*",
            leader_election=opsettings.leader_election,
        )

    opsettings = settings

    @kopf.on.cleanup(id="operator_cleanup", registry=registry)
    async def operator_cleanup(memo: Any, **_: Any) -> None:
        await asyncio.to_thread(_runtime(memo).shutdown)

    @kopf.on.login(id="login", registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.event(GROUP, VERSION, BATCH_PLURAL, id="batch_event", registry=registry)
    def batch_event(type: str, body: kopf.Body, memo: Any, **_: Any) -> None:
        batch = Batch.from_api(dict(body))
        if type == "DELETED":
            _runtime(memo).controller.forget_batch(batch.key)
            _runtime(memo).notifier.batch_deleted(batch.key)
        else:
            _runtime(memo).controller.put_batch(batch)

    @kopf.on.delete(GROUP, VERSION, BATCH_PLURAL, id="batch_delete", backoff=5, registry=registry)
    async def batch_delete(body: kopf.Body, memo: Any, **_: Any) -> None:
        runtime = _runtime(memo)
        if not runtime.controller.leading.is_set():
            raise kopf.TemporaryError("not the leader; the leading replica handles it", delay=5)
        batch = Batch.from_api(dict(body))
        if runtime.notifier.deletion_pending(batch):
            # Its events are still being tried, or this term has not loaded what is owed
            # (notify.delete_seconds at most): the jobs they are recorded on stay until then.
            raise kopf.TemporaryError("the Batch's events are still being delivered", delay=5)
        cancelled = await asyncio.to_thread(runtime.controller.cancel_batch, batch)
        _log.info("batch_deleted", batch=batch.name, namespace=batch.namespace, cancelled=cancelled)
