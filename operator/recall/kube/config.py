"""Connecting: an API client from a kubeconfig or the pod's service account, and the namespace
to work in.

The client retries nothing on its own (the callers do, on their own terms), and its connections
use TCP keepalive: a peer gone without a FIN or RST (a node lost, a NAT entry dropped) is
noticed about `KEEPALIVE_IDLE + KEEPALIVE_INTERVAL × KEEPALIVE_COUNT` seconds (60) after the
last byte, even on an open watch that waits for its next event.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import urllib3
from kubernetes import client, config

KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_COUNT = 30, 10, 3


def keepalive_options() -> list[tuple[int, int, int]]:
    """urllib3's socket options (no Nagle) plus TCP keepalive, the timings this platform can
    set (Linux all three; macOS and Windows may lack some and keep their own)."""
    options = list(urllib3.connection.HTTPConnection.default_socket_options)
    options.append((socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1))
    for name, value in (
        ("TCP_KEEPIDLE", KEEPALIVE_IDLE),
        ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL),
        ("TCP_KEEPCNT", KEEPALIVE_COUNT),
    ):
        if hasattr(socket, name):
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    return options


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
    cfg.socket_options = keepalive_options()
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
