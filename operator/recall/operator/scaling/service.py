"""The autoscalers' part of one operator process: the pools' outstanding work, the built-in
scaler of each worker Deployment, and the endpoint KEDA reads.

- `workload` counts every pool's outstanding work from the job cache (always: the endpoint and
  the metrics read it);
- a scaler per scaled pool (`mode: builtin`; `autoscale_deployment` for the default pool,
  `autoscale_pools` for the others), each on its own thread every `autoscale_interval` seconds;
  only the leader acts;
- the endpoint (`keda`) runs when `workload_port` is set (`mode: keda`).

Both hold while the views they read are not current (`stale`): the job informer, and the
registration informer the built-in scaler needs to tell idle workers from busy ones.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from typing import Any, Protocol

from recall.base import endpoint
from recall.base.settings import OperatorSettings
from recall.kube import Api
from recall.kube.informer import Informer
from recall.operator.peers.leader import Leadership, Sole
from recall.operator.peers.registry import Registry
from recall.operator.scaling import keda as metrics_api
from recall.operator.scaling.decide import Policy
from recall.operator.scaling.scaler import Scaler, Sources, Target
from recall.operator.scaling.workload import Workload


class Spawn(Protocol):
    """Starts `target(stop)` on a thread; a `reader` is not waited for when the operator stops."""

    def __call__(
        self, name: str, target: Callable[[threading.Event], Any], *, reader: bool = False
    ) -> None: ...


class Autoscaling:
    def __init__(
        self,
        store: Api,
        settings: OperatorSettings,
        workload: Workload,
        registry: Registry,
        busy: Callable[[], set[tuple[str, str]]],
        leadership: Leadership | None,
        *,
        jobs: Informer,
        registrations: Informer,
    ) -> None:
        """`workload` is kept current from the job cache, `registry` from `registrations`;
        `busy`: the workers holding offers; `leadership` fences the writes (None: a sole one)."""
        self.settings = settings
        self.jobs = jobs
        self.registrations = registrations
        self.workload = workload
        self.namespace = settings.autoscale_namespace or settings.namespace or "default"
        self.scalers: list[Scaler] = []
        self.server: ThreadingHTTPServer | None = None
        sources = Sources(self.workload, registry, busy, self.stale)
        for pool in settings.scaled_pools():
            policy = Policy(
                minimum=pool.min,
                maximum=pool.max,
                cooldown=settings.autoscale_cooldown_seconds,
                step=settings.autoscale_step,
                mark_pods=settings.autoscale_mark_pods,
                slots=pool.slots,
            )
            self.scalers.append(
                Scaler(
                    store,
                    Target(self.namespace, pool.deployment, pool.engine, pool.pool),
                    policy,
                    sources,
                    leadership or Sole(),
                    identity=settings.identity,
                    interval=settings.autoscale_interval,
                )
            )

    def stale(self) -> str | None:
        """Why the views the autoscalers read are not current (None: they are)."""
        if not self.jobs.current():
            return "the job informer is not current"
        if self.scalers and not self.registrations.current():
            return "the worker registration informer is not current"
        return None

    def start(self, spawn: Spawn) -> None:
        if self.scalers:
            if not self.settings.dispatch:  # the registrations are not watched for offers
                spawn("registrations", self.registrations.run, reader=True)
            for scaler in self.scalers:
                spawn(f"scaler-{scaler.target.pool}", scaler.run)
        answers = metrics_api.route(
            self.workload,
            self.stale,
            namespace=self.namespace,
            engine=self.settings.autoscale_engine,
        )
        self.server = endpoint.serve(answers, self.settings.workload_port, "workload-api")

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
