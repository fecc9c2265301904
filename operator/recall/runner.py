"""`recall operator`: kopf with the project's handlers and settings.

A thin wrapper around `kopf.run`: one registry with the handlers of `recall.handlers`,
standalone unless a peering name is given (then the alive peer with the highest priority acts
and the others pause), kopf's liveness endpoint and our metrics on their ports.
"""

from __future__ import annotations

import logging
import os
import random
from pathlib import Path

import kopf
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from recall import handlers, log, metrics
from recall.kube import Kube, load_api_client
from recall.settings import OperatorSettings


def run_operator(settings: OperatorSettings, kubeconfig: Path | None = None) -> None:
    if kubeconfig is not None:
        os.environ["KUBECONFIG"] = str(kubeconfig)  # kopf's own login reads it from here
    if settings.peering and settings.priority is None:
        settings = settings.model_copy(update={"priority": random.randint(1, 1_000_000)})
    kube = Kube(load_api_client(kubeconfig))
    if settings.peering:
        ensure_peering(kube.api, settings.peering, settings.namespace)
    # kopf logs every handler run at INFO ("Timer 'batch_tick' succeeded." twice a second per
    # Batch); our handlers log what they do themselves.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    registry = kopf.OperatorRegistry()
    handlers.register(registry, settings, kube)
    metrics.serve(settings.metrics_port)
    liveness = (
        f"http://0.0.0.0:{settings.liveness_port}/healthz" if settings.liveness_port else None
    )
    log.get("operator").info(
        "operator_starting",
        peering=settings.peering,
        priority=settings.priority,
        namespace=settings.namespace or "*",
    )
    kopf.run(
        registry=registry,
        standalone=settings.peering is None,
        peering_name=settings.peering,
        priority=settings.priority or 0,
        clusterwide=settings.namespace is None,
        namespaces=[settings.namespace] if settings.namespace else (),
        liveness_endpoint=liveness,
        memo=kopf.Memo(),
    )


def ensure_peering(api: client.ApiClient, name: str, namespace: str | None) -> None:
    """Create kopf's peering object `name` (namespaced, or cluster-wide when no namespace)."""
    custom = client.CustomObjectsApi(api)
    kind = "KopfPeering" if namespace else "ClusterKopfPeering"
    body = {"apiVersion": "kopf.dev/v1", "kind": kind, "metadata": {"name": name}}
    try:
        if namespace:
            custom.create_namespaced_custom_object(
                "kopf.dev", "v1", namespace, "kopfpeerings", body
            )
        else:
            custom.create_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", body)
    except ApiException as e:
        if e.status != 409:
            raise
