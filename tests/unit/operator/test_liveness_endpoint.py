"""kopf's liveness endpoint listens on the cluster's address family (asyncio cannot listen on
both with one socket)."""

from __future__ import annotations

import pytest

from recall.base import endpoint
from recall.operator.runtime.runner import liveness_endpoint


@pytest.mark.parametrize(
    ("service_host", "url"),
    [
        ("fd00:10:96::1", "http://[::]:8080/healthz"),
        ("10.96.0.1", "http://0.0.0.0:8080/healthz"),
        ("", "http://0.0.0.0:8080/healthz"),
    ],
)
def test_kopf_liveness__listens_on_the_clusters_family(
    monkeypatch: pytest.MonkeyPatch, service_host: str, url: str
) -> None:
    if service_host.count(":") and endpoint.any_address() != "::":
        url = "http://0.0.0.0:8080/healthz"  # a host without IPv6 cannot listen on it
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", service_host)
    assert liveness_endpoint(8080) == url
    assert liveness_endpoint(0) is None
