"""The autoscalers' part of one operator process: the pool's outstanding work, the built-in
scaler of the worker Deployment, and the endpoint KEDA reads.

    autoscaling = Autoscaling(store, settings, controller, jobs=informer, registrations=...)
    autoscaling.start(spawn)     # threads, beside the controller's
    autoscaling.stop()

- `workload` counts the outstanding work of every pool from the job cache (always: the
  endpoint and the metrics read it);
- the scaler runs when `autoscale_deployment` is set (`worker.autoscaling.mode: builtin`),
  on its own thread, every `autoscale_interval` seconds; only the leader acts;
- the endpoint (`metrics_api`) runs when `workload_port` is set (`mode: keda`).

Both hold when the views they read are not current (`stale`): the job informer, and the
registration informer the built-in scaler needs to tell idle workers from busy ones.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from typing import Any, Protocol

from recall.base.settings import OperatorSettings
from recall.kube import Store
from recall.kube.informer import Informer
from recall.operator import metrics_api
from recall.operator.controller import Controller
from recall.operator.scaler import Policy
from recall.operator.scaling import Scaler, Sources, Target
from recall.operator.workload import Workload


class Spawn(Protocol):
    """Starts `target(stop)` on a thread; a `reader` is not waited for when the operator stops."""

    def __call__(
        self, name: str, target: Callable[[threading.Event], Any], *, reader: bool = False
    ) -> None: ...


class Autoscaling:
    def __init__(
        self,
        store: Store,
        settings: OperatorSettings,
        controller: Controller,
        *,
        jobs: Informer,
        registrations: Informer,
    ) -> None:
        self.settings = settings
        self.jobs = jobs
        self.registrations = registrations
        self.workload = Workload()
        controller.cache.listeners.append(self.workload.update)
        self.namespace = settings.autoscale_namespace or settings.namespace or "default"
        self.scaler: Scaler | None = None
        self.server: ThreadingHTTPServer | None = None
        if settings.autoscale_deployment is not None:
            policy = Policy(
                minimum=settings.autoscale_min,
                maximum=settings.autoscale_max,
                cooldown=settings.autoscale_cooldown_seconds,
                step=settings.autoscale_step,
                mark_pods=settings.autoscale_mark_pods,
            )
            sources = Sources(self.workload, controller.registry, controller.ready.busy, self.stale)
            self.scaler = Scaler(
                store,
                Target(self.namespace, settings.autoscale_deployment, settings.autoscale_engine),
                policy,
                sources,
                controller.applier.leadership,
                identity=settings.identity,
                interval=settings.autoscale_interval,
            )

    def stale(self) -> str | None:
        """Why the views the autoscalers read are not current (None: they are)."""
        if not self.jobs.current():
            return "the job informer is not current"
        if self.scaler is not None and not self.registrations.current():
            return "the worker registration informer is not current"
        return None

    def start(self, spawn: Spawn) -> None:
        if self.scaler is not None:
            if not self.settings.dispatch:  # the registrations are not watched for offers
                spawn("registrations", self.registrations.run, reader=True)
            spawn("scaler", self.scaler.run)
        self.server = metrics_api.serve(
            self.workload,
            self.stale,
            namespace=self.namespace,
            engine=self.settings.autoscale_engine,
            port=self.settings.workload_port,
        )

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
