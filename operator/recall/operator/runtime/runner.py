"""`recall operator`: kopf with the project's handlers and settings.

A thin wrapper around `kopf.run`: one registry with the handlers of
`recall.operator.runtime.handlers`, kopf in standalone mode in every replica (replicas elect one
acting leader through a Lease when `leader_election` is on), kopf's liveness endpoint (on the
cluster's address family, `liveness_endpoint`) and our metrics on their ports. kopf starts once
discovery serves the resources, and the operator exits, with the reason, when kopf resolved them
without one (`recall.operator.runtime.discovery`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kopf
from kopf._cogs.structs.references import Insights  # what kopf resolved; kopf.run takes it

from recall.base import endpoint, log, metrics
from recall.base.settings import ApiSettings, OperatorSettings, StoreSettings
from recall.bucket import StoreError, Stores
from recall.kube.client import KubeClient, load_api_client
from recall.operator.runtime import discovery, handlers
from recall.resources import BATCH_PLURAL, JOB_PLURAL

# Served before the operator starts: the Batches (kopf watches them) and the jobs (its informer).
NEEDED = (BATCH_PLURAL, JOB_PLURAL)
KOPF_WATCHES = (BATCH_PLURAL,)


def liveness_endpoint(port: int) -> str | None:
    """kopf's liveness URL for `port` (0: None, off). kopf listens through asyncio, which
    cannot listen on both families with one socket: it listens on the cluster's family."""
    if not port:
        return None
    host = endpoint.cluster_any_address()
    return f"http://{'[::]' if host == '::' else host}:{port}/healthz"


def run_operator(settings: OperatorSettings, kubeconfig: Path | None = None) -> None:
    store = _client(kubeconfig)
    # kopf logs every handler run at INFO; our handlers log what they do themselves.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    registry = kopf.OperatorRegistry()
    handlers.register(registry, settings, store, _stores())
    try:
        discovery.wait_served(store.http, NEEDED, settings.discovery_seconds)
    except discovery.NotServed as e:
        raise SystemExit(f"recall operator: {e}") from None
    insights = Insights()
    stopped = asyncio.Event()  # set in kopf's loop; a threading.Event would hold its exit
    reasons: list[str] = []

    def stop(reason: str) -> None:
        reasons.append(reason)
        stopped.set()

    _check_resources(registry, insights, stop, stopped)
    metrics.serve(settings.metrics_port)
    liveness = liveness_endpoint(settings.liveness_port)
    log.get("operator").info(
        "operator_starting",
        namespace=settings.namespace or "*",
        leader_election=settings.leader_election,
        identity=settings.identity,
    )
    kopf.run(
        registry=registry,
        standalone=True,
        clusterwide=settings.namespace is None,
        namespaces=[settings.namespace] if settings.namespace else (),
        liveness_endpoint=liveness,
        memo=kopf.Memo(),
        insights=insights,
        stop_flag=stopped,
    )
    if reasons:
        raise SystemExit(f"recall operator: {reasons[0]}")


def _client(kubeconfig: Path | None) -> KubeClient:
    """The API client: from `kubeconfig`, $KUBECONFIG, ~/.kube/config, or in-cluster."""
    if kubeconfig is not None:
        os.environ["KUBECONFIG"] = str(kubeconfig)  # kopf's own login reads it from here
    api = ApiSettings()
    return KubeClient(
        load_api_client(kubeconfig, pool_size=32),
        timeout=api.timeout,
        watch_seconds=api.watch_seconds,
    )


def _stores() -> Stores:
    """The object stores; exits now, with the reason, when no usable results URL is set."""
    try:
        stores = Stores(StoreSettings())
        stores.results()
    except StoreError as e:
        raise SystemExit(f"recall operator: {e.message}") from None
    return stores


def _check_resources(
    registry: kopf.OperatorRegistry,
    insights: Insights,
    stop: Callable[[str], None],
    stopped: asyncio.Event,
) -> None:
    """Register the check that kopf resolved the resources it watches (`stop` with the reason
    when it did not), and its end at kopf's cleanup."""
    checks: list[asyncio.Task[None]] = []

    @kopf.on.startup(id="resources_check", registry=registry)
    async def resources_check(**_: Any) -> None:
        checks.append(asyncio.create_task(discovery.check_insights(insights, KOPF_WATCHES, stop)))

    @kopf.on.cleanup(id="resources_check_end", registry=registry)
    async def resources_check_end(**_: Any) -> None:
        stopped.set()  # kopf's exit waits for every task, its waiter on this flag too
