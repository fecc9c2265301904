"""The chart's KEDA mode (`worker.autoscaling.mode: keda`), proven without KEDA: by render, by
KEDA's own CRD schema on the real API server, and by the endpoint its trigger reads.

- Without `keda.sh/v1alpha1` the render fails and says why; with it (`--api-versions`, as
  Helm's Capabilities) the ScaledObject is rendered.
- KEDA's ScaledObject CRD, taken from its Go module (`recall_dev.keda`: v2.21.0, downloaded
  once into the cache, nothing built), is installed into the real API server for this module;
  the rendered object passes `kubectl apply --dry-run=server`, and the same object with a wrong
  field is refused (the check is real).
- The schema does not type a trigger's metadata, so the endpoint it names is checked itself:
  the URL points at the chart's operator Service and port, and the real `recall operator`,
  started with the chart's variable, serves there the outstanding work under the trigger's
  `valueLocation`.
"""

from __future__ import annotations

import copy
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from recall.kube.client import KubeClient as Kube
from recall_dev.cluster import ControlPlane, free_port
from recall_dev.keda import KedaUnavailable, scaledobject_crd
from tests.helpers import Procs, create_job, get_json, job_manifest, wait_for
from tests.integration.test_chart import (
    CHART,
    RELEASE,
    Tools,
    container,
    env_of,
    find,
    merged,
    tools,
)

pytestmark = pytest.mark.integration
__all__ = ["tools"]  # the fixture, shared with test_chart.py

KEDA = {"worker": {"autoscaling": {"mode": "keda", "cooldownSeconds": 120}}}
SCALED_OBJECTS = "scaledobjects.keda.sh"
KEDA_API = ("--api-versions", "keda.sh/v1alpha1")


def render(tools: Tools, tmp: Path, values: dict[str, Any], *extra: str) -> Any:
    path = tmp / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return tools.run(
        "helm", "template", RELEASE, str(CHART), "--namespace", "recall", "--values", str(path),
        *extra,
    )  # fmt: skip


@pytest.fixture(scope="module")
def keda_crd(tools: Tools, control_plane: ControlPlane) -> Iterator[Path]:
    """KEDA's ScaledObject CRD installed into the API server for this module, then removed."""
    try:
        crd = scaledobject_crd()
    except KedaUnavailable as e:
        pytest.fail(f"KEDA's CRD is needed to check the chart's KEDA mode: {e}")
    tools.ok("kubectl", "apply", "-f", str(crd), kubeconfig=control_plane.kubeconfig)
    tools.ok(
        "kubectl", "wait", "--for=condition=Established", f"crd/{SCALED_OBJECTS}", "--timeout=60s",
        kubeconfig=control_plane.kubeconfig,
    )  # fmt: skip
    try:
        yield crd
    finally:
        tools.run("kubectl", "delete", "crd", SCALED_OBJECTS, "--wait=true",
                  kubeconfig=control_plane.kubeconfig)  # fmt: skip


def scaled_object(tools: Tools, tmp: Path, values: dict[str, Any] = KEDA) -> dict[str, Any]:
    out = render(tools, tmp, values, *KEDA_API)
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    found: dict[str, Any] = find(docs, "ScaledObject", "-worker")
    return found


def test_render__fails_clearly_where_the_cluster_has_no_keda(tools: Tools, tmp_path: Path) -> None:
    out = render(tools, tmp_path, KEDA)
    assert out.returncode != 0
    assert "worker.autoscaling.mode=keda needs KEDA in the cluster" in out.stderr
    assert "keda.sh/v1alpha1" in out.stderr and "mode=builtin" in out.stderr


def test_scaled_object__scales_on_the_outstanding_work_and_never_shrinks_on_failure(
    tools: Tools, tmp_path: Path
) -> None:
    so = scaled_object(tools, tmp_path)
    spec = so["spec"]
    assert spec["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": f"{RELEASE}-recall-worker",
    }
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (0, 10)
    assert spec["cooldownPeriod"] == spec["initialCooldownPeriod"] == 120
    assert spec["fallback"]["behavior"] == "currentReplicasIfHigher"
    scale_down = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
    assert scale_down["stabilizationWindowSeconds"] == 120
    assert scale_down["policies"] == [{"type": "Pods", "value": 2, "periodSeconds": 60}]
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "metrics-api" and trigger["metricType"] == "AverageValue"
    meta = trigger["metadata"]
    assert (meta["valueLocation"], meta["targetValue"], meta["format"]) == (
        "outstanding",
        "1",
        "json",
    )


def test_scaled_object__valid_against_kedas_crd_on_the_real_api_server(
    tools: Tools, control_plane: ControlPlane, keda_crd: Path, namespace: str, tmp_path: Path
) -> None:
    so = scaled_object(tools, tmp_path)
    so["metadata"]["namespace"] = namespace

    def dry_run(obj: dict[str, Any]) -> Any:
        return tools.run(
            "kubectl", "apply", "--dry-run=server", "-f", "-",
            kubeconfig=control_plane.kubeconfig, stdin=yaml.safe_dump(obj),
        )  # fmt: skip

    accepted = dry_run(so)
    assert accepted.returncode == 0, accepted.stderr
    assert "scaledobject.keda.sh/rc-recall-worker created (server dry run)" in accepted.stdout
    wrong = copy.deepcopy(so)
    wrong["spec"]["fallback"]["behavior"] = "shrinkOnFailure"
    refused = dry_run(wrong)
    assert refused.returncode != 0 and "spec.fallback.behavior" in refused.stderr
    untyped = copy.deepcopy(so)
    untyped["spec"]["triggers"][0]["metadata"]["targetValue"] = 1  # metadata values are strings
    refused = dry_run(untyped)
    assert refused.returncode != 0 and "targetValue" in refused.stderr


def test_trigger_url__names_the_chart_service_and_port_the_operator_serves(
    tools: Tools, tmp_path: Path
) -> None:
    out = render(tools, tmp_path, KEDA, "--api-versions", "keda.sh/v1alpha1")
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    url = urllib.parse.urlsplit(
        find(docs, "ScaledObject", "-worker")["spec"]["triggers"][0]["metadata"]["url"]
    )
    service = find(docs, "Service", "-operator-workload")
    assert url.hostname == f"{service['metadata']['name']}.recall.svc"
    assert url.port == service["spec"]["ports"][0]["port"] == 9091
    assert urllib.parse.parse_qs(url.query) == {"namespace": ["recall"], "engine": ["whisper"]}
    operator = container(find(docs, "Deployment", "-operator"))
    assert {"name": "workload", "containerPort": 9091, "protocol": "TCP"} in operator["ports"]
    assert env_of(operator)["RECALL_OPERATOR_WORKLOAD_PORT"] == "9091"
    assert env_of(operator)["RECALL_OPERATOR_AUTOSCALE_NAMESPACE"] == "recall"
    worker = find(docs, "Deployment", "-worker")
    assert "replicas" not in worker["spec"], "KEDA's HPA owns the count"
    assert "RECALL_OPERATOR_AUTOSCALE_DEPLOYMENT" not in env_of(operator), "KEDA scales, not us"


@pytest.mark.slow
def test_endpoint__the_real_operator_serves_what_the_trigger_reads(
    tools: Tools, kube: Kube, api: client.ApiClient, namespace: str, procs: Procs, tmp_path: Path
) -> None:
    trigger = scaled_object(tools, tmp_path)["spec"]["triggers"][0]["metadata"]
    query = urllib.parse.urlsplit(trigger["url"]).query.replace("=recall", f"={namespace}")
    query = query.replace("engine=whisper", "engine=simulated")
    port = free_port()
    procs.recall(
        "operator", "operator", "--namespace", namespace,
        env={"RECALL_OPERATOR_WORKLOAD_PORT": str(port),
             "RECALL_OPERATOR_AUTOSCALE_ENGINE": "simulated"},
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/workload?{query}"
    for k in range(4):
        create_job(kube, namespace, f"j{k}")

    def outstanding() -> int | None:
        code, body = get_json(url)
        return body.get(trigger["valueLocation"]) if code == 200 else None

    wait_for(lambda: outstanding() == 4, timeout=60, interval=0.2, message=url)
    assert get_json(url) == (
        200,
        {
            "namespace": namespace,
            "engine": "simulated",
            "pool": "default",
            "queued": 4,
            "leased": 0,
            "outstanding": 4,
        },
    )
    assert isinstance(outstanding(), int), "a number where KEDA looks"
    # A pool's trigger reads its own work only: jobs that name the pool.
    pools = merged(KEDA, {"engine": {"name": "simulated"}, "pools": [{"name": "gpu"}]})
    gpu = find(
        [d for d in yaml.safe_load_all(render(tools, tmp_path, pools, *KEDA_API).stdout) if d],
        "ScaledObject", "-worker-gpu",
    )["spec"]["triggers"][0]["metadata"]  # fmt: skip
    gpu_query = urllib.parse.urlsplit(gpu["url"]).query.replace("=recall", f"={namespace}")
    gpu_url = f"http://127.0.0.1:{port}/workload?{gpu_query}"
    for k in range(3):
        manifest = job_manifest(f"gpu{k}")
        manifest["spec"]["pool"] = "gpu"
        kube.create_job(namespace, manifest)
    wait_for(lambda: get_json(gpu_url)[1].get("outstanding") == 3, timeout=60, interval=0.2,
             message=gpu_url)  # fmt: skip
    assert get_json(gpu_url)[1]["pool"] == "gpu"
    assert outstanding() == 4, "the default pool's work is its own"
    kube.delete_jobs(namespace, "")
    wait_for(lambda: outstanding() == 0, timeout=60, interval=0.2, message=url)
