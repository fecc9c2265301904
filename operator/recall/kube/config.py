"""Connecting: an API client from a kubeconfig or the pod's service account, and the namespace
to work in."""

from __future__ import annotations

import os
from pathlib import Path

import urllib3
from kubernetes import client, config


def load_api_client(
    kubeconfig: str | Path | None = None, context: str | None = None, *, pool_size: int = 16
) -> client.ApiClient:
    """An API client from the given kubeconfig, $KUBECONFIG, ~/.kube/config, or in-cluster."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    cfg = client.Configuration()
    if path is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=cfg)
    else:
        config.load_kube_config(
            config_file=str(path) if path else None, context=context, client_configuration=cfg
        )
    # Several threads (heartbeater, watcher, main loop) share one client.
    cfg.connection_pool_maxsize = pool_size
    # No hidden retries: the callers retry on their own terms (a lease holder only until its
    # renew deadline), and a write retried blindly could be applied twice.
    cfg.retries = urllib3.util.retry.Retry(total=0, connect=0, read=0, redirect=3, status=0)
    return client.ApiClient(cfg)


def current_namespace(kubeconfig: str | Path | None = None) -> str:
    """The namespace of the pod (in a cluster) or of the kubeconfig's current context."""
    sa_ns = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
    if os.environ.get("KUBERNETES_SERVICE_HOST") and sa_ns.exists():
        return sa_ns.read_text().strip()
    try:
        _, active = config.list_kube_config_contexts(
            config_file=str(kubeconfig or os.environ.get("KUBECONFIG") or "") or None
        )
    except (config.ConfigException, OSError):
        return "default"
    return str((active or {}).get("context", {}).get("namespace") or "default")
