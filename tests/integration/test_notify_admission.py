"""Bad sinks refused at admission, on the real API server: the CRD's CEL refuses a URL that is
not http(s); the chart's ValidatingAdmissionPolicy (as `helm template` renders it, bound to the
test's namespace only) refuses loopback, link-local and metadata hosts unless notify.allow
names them (an address or a network), and Secrets outside notify.secretNames."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from recall_dev.cluster import ControlPlane
from tests.helpers import job_manifest, wait_for
from tests.integration.test_pod_identity import kubectl, render

pytestmark = pytest.mark.integration
GROUP, VERSION, PLURAL = "recall.dev", "v1alpha1", "transcriptionjobs"


def create(api: client.ApiClient, namespace: str, name: str, url: str, secret: str) -> str | None:
    """Create a job with one sink; None when admitted, else the refusal's message."""
    manifest = job_manifest(name)
    manifest["spec"]["notify"] = [{"url": url, "secretRef": {"name": secret, "key": "hmac"}}]
    try:
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, manifest
        )
    except ApiException as e:
        return str(json.loads(e.body or "{}").get("message") or e.reason)
    return None


@pytest.fixture
def policy(control_plane: ControlPlane, namespace: str, tmp_path: Path) -> Iterator[None]:
    allow = "notify.allow={127.0.0.1,169.254.170.0/24,fd00:ec2::/112}"
    docs = render(control_plane, tmp_path, namespace, allow)
    objects = [
        d
        for d in docs
        if d["kind"].startswith("ValidatingAdmissionPolicy")
        and d["metadata"]["name"].endswith("notify-sinks")
    ]
    assert len(objects) == 2
    for d in objects:
        d["metadata"]["name"] += f"-{namespace}"
        if d["kind"] == "ValidatingAdmissionPolicyBinding":
            d["spec"]["policyName"] += f"-{namespace}"
            d["spec"]["matchResources"] = {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            }
    text = "\n---\n".join(json.dumps(d) for d in objects)
    kubectl(control_plane, "apply", "-f", "-", stdin=text)
    try:
        yield
    finally:
        kubectl(control_plane, "delete", "--ignore-not-found", "-f", "-", stdin=text)


def test_sinks__refused_at_admission_unless_allowed(
    api: client.ApiClient, namespace: str, policy: None
) -> None:
    # The CRD: an http(s) URL with a host, whatever the policy.
    message = create(api, namespace, "ftp", "ftp://x/", "recall-notify")
    assert message and "http:// or https://" in message
    # The policy takes effect once the API server has loaded it.
    n = iter(range(1000))
    wait_for(
        lambda: create(api, namespace, f"m{next(n)}", "http://169.254.169.254/", "recall-notify"),
        timeout=30,
        message="the admission policy to refuse a metadata address",
    )
    refused = {
        "meta": "http://169.254.169.254/latest/",
        "gce": "http://metadata.google.internal/",
        "local": "http://localhost:8080/",
        "loop6": "http://[::1]:8080/",
        "ll6": "http://[fe80::1]/",
        "any": "http://0.0.0.0/",
    }
    for name, url in refused.items():
        message = create(api, namespace, name, url, "recall-notify")
        assert message and "loopback, link-local or metadata" in message, (url, message)
    assert create(api, namespace, "allowed", "http://127.0.0.1:9/events", "recall-notify") is None
    # Networks in notify.allow (CIDRs), as the operator reads them at connection.
    assert create(api, namespace, "ecs", "http://169.254.170.2/v2/", "recall-notify") is None
    assert create(api, namespace, "ec2v6", "http://[fd00:ec2::254]/", "recall-notify") is None
    message = create(api, namespace, "ll", "http://169.254.171.2/", "recall-notify")
    assert message and "loopback, link-local or metadata" in message
    assert create(api, namespace, "public", "https://hooks.example.com/r", "recall-notify") is None
    message = create(api, namespace, "other", "https://hooks.example.com/r", "db-password")
    assert message and "notify.secretNames" in message
