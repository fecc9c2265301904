"""Worker pools in the chart (`pools`): a GPU pool rendered, linted and installed on the real API
server, and scaled there by the real operator from the settings the chart gives it.

- A pool is a Deployment of its own (`<release>-recall-worker-<pool>`): its image, resources,
  placement, engine and worker settings, the rest the default pool's. Its pods carry the
  component label `worker-<pool>`, so every worker pod has exactly one Deployment, one
  disruption budget, one NetworkPolicy and one metrics Service selecting it (the default pool's
  selector, immutable since the first release, selects component `worker` only).
- Builtin mode: the operator's RECALL_OPERATOR_AUTOSCALE_POOLS, read by OperatorSettings, names
  each pool's Deployment, engine, bounds and slots; the operator may scale every pool's
  Deployment and no other. KEDA mode: one ScaledObject per pool, its target the pool's slots.
- Installed with `helm install` on the real API server, the real operator (as the chart's
  ServiceAccount) scales the GPU pool on its own outstanding work and the default pool on its
  own; `recall watch` shows the pool and its slots. An upgrade from the previous release adds
  a pool and keeps the default pool's selector.
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from recall.base.settings import OperatorSettings
from recall.cli.watch import fleet_line
from recall.kube.client import KubeClient as Kube
from recall.operator.scaling.scaler import STATUS_ANNOTATION
from recall.resources import API_VERSION
from recall_dev.cluster import ControlPlane
from tests.helpers import Procs, wait_for
from tests.integration.test_chart import (
    CHART,
    RELEASE,
    ROOT,
    Tools,
    container,
    env_of,
    find,
    merged,
    tools,
    values_file,
)
from tests.integration.test_chart_autoscaling import can_i
from tests.integration.test_chart_keda import keda_crd
from tests.rbac import service_account_token, token_kubeconfig

pytestmark = pytest.mark.integration
__all__ = ["keda_crd", "tools"]  # the fixtures, shared with test_chart.py and test_chart_keda.py

WORKER = f"{RELEASE}-recall-worker"
GPU = f"{RELEASE}-recall-worker-gpu"
DIGEST = "sha256:" + "ab" * 32
GPU_POOL: dict[str, Any] = {
    "name": "gpu",
    "image": {"repository": "recall.local/recall", "tag": "dev-cuda"},
    "slots": 4,
    "batchSize": 8,
    "device": "cuda",
    "computeType": "float16",
    "engine": {"whisper": {"model": "s3://models/faster-whisper-large-v3/"}},
    "resources": {
        "requests": {"cpu": "2", "memory": "8Gi", "ephemeral-storage": "256Mi"},
        "limits": {"cpu": "4", "memory": "16Gi", "ephemeral-storage": "7Gi", "nvidia.com/gpu": 1},
    },
    "nodeSelector": {"nvidia.com/gpu.present": "true"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "autoscaling": {"minReplicas": 0, "maxReplicas": 3},
    "graceSeconds": 30,
}
WITH_GPU: dict[str, Any] = {"image": {"digest": DIGEST}, "pools": [GPU_POOL]}
OPT_INS: dict[str, Any] = {
    "worker": {"podDisruptionBudget": {"enabled": True}},
    "networkPolicy": {"enabled": True},
}


def template_labels(deployment: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = deployment["spec"]["template"]["metadata"]["labels"]
    return labels


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def workers(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        d
        for d in docs
        if d["kind"] == "Deployment" and "recall.dev/pool" in d["metadata"].get("labels", {})
    ]


# --- rendering ----------------------------------------------------------------------------------


def test_template_gpu_pool__a_deployment_of_its_own_on_its_nodes(
    tools: Tools, tmp_path: Path
) -> None:
    docs = tools.render(tmp_path, WITH_GPU)
    default, gpu = find(docs, "Deployment", "-worker"), find(docs, "Deployment", "-worker-gpu")
    assert [d["metadata"]["name"] for d in workers(docs)] == [WORKER, GPU]
    pod = gpu["spec"]["template"]["spec"]
    wk = container(gpu)
    # its image alone: the chart's digest pins the chart's image, not this one
    assert wk["image"] == "recall.local/recall:dev-cuda"
    assert container(default)["image"] == f"recall@{DIGEST}"
    assert wk["resources"] == GPU_POOL["resources"]
    assert pod["nodeSelector"] == GPU_POOL["nodeSelector"]
    assert pod["tolerations"] == GPU_POOL["tolerations"]
    assert pod["terminationGracePeriodSeconds"] == 50  # its own grace + 20 s
    env = env_of(wk)
    assert {k: env[k] for k in env if k.startswith("RECALL_WORKER_")} == {
        **{k: v for k, v in env_of(container(default)).items() if k.startswith("RECALL_WORKER_")},
        "RECALL_WORKER_POOL": "gpu",
        "RECALL_WORKER_SLOTS": "4",
        "RECALL_WORKER_BATCH_SIZE": "8",
        "RECALL_WORKER_DEVICE": "cuda",
        "RECALL_WORKER_COMPUTE_TYPE": "float16",
        "RECALL_WORKER_GRACE_SECONDS": "30",
        "RECALL_WORKER_WHISPER_MODEL": "s3://models/faster-whisper-large-v3/",
    }, "the pool's own settings; everything else the default pool's"
    assert env_of(container(default))["RECALL_WORKER_POOL"] == "default"
    assert env_of(container(default))["RECALL_WORKER_SLOTS"] == "1"
    assert "nodeSelector" not in default["spec"]["template"]["spec"]
    # what the operator and `recall watch` read on the Deployment, and the pods' labels
    assert gpu["metadata"]["labels"]["recall.dev/pool"] == "gpu"
    assert gpu["metadata"]["annotations"]["recall.dev/slots"] == "4"
    assert gpu["metadata"]["labels"]["recall.dev/autoscaling"] == "fixed"
    assert default["metadata"]["labels"]["recall.dev/pool"] == "default"
    assert template_labels(gpu)["app.kubernetes.io/component"] == "worker-gpu"
    assert template_labels(gpu)["recall.dev/pool"] == "gpu"
    assert gpu["spec"]["template"]["spec"]["serviceAccountName"] == f"{RELEASE}-recall-worker"
    # the default pool's selector is the first release's, and does not reach the pool's pods
    assert default["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "recall",
        "app.kubernetes.io/instance": RELEASE,
        "app.kubernetes.io/component": "worker",
    }
    assert not matches(default["spec"]["selector"]["matchLabels"], template_labels(gpu))
    spread = pod["topologySpreadConstraints"][0]["labelSelector"]["matchLabels"]
    assert spread == gpu["spec"]["selector"]["matchLabels"]


def test_template_pools__each_worker_pod_has_one_deployment_budget_policy_and_metrics_service(
    tools: Tools, tmp_path: Path
) -> None:
    docs = tools.render(tmp_path, merged(WITH_GPU, OPT_INS, {"pools": [GPU_POOL, {"name": "cpu"}]}))
    pods = {d["metadata"]["name"]: template_labels(d) for d in workers(docs)}
    assert set(pods) == {WORKER, GPU, f"{WORKER}-cpu"}

    def selecting(kind: str, selector: Any) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {name: [] for name in pods}
        for d in docs:
            if d["kind"] == kind:
                for name, labels in pods.items():
                    if matches(selector(d), labels):
                        out[name].append(d["metadata"]["name"])
        return out

    for kind, selector in (
        ("Deployment", lambda d: d["spec"]["selector"]["matchLabels"]),
        ("PodDisruptionBudget", lambda d: d["spec"]["selector"]["matchLabels"]),
        ("NetworkPolicy", lambda d: d["spec"]["podSelector"]["matchLabels"]),
        ("Service", lambda d: d["spec"].get("selector") or {"-": "none"}),
    ):
        found = selecting(kind, selector)
        # one each, named after the pool's Deployment (the Service with -metrics)
        assert {p: [n.removesuffix("-metrics") for n in s] for p, s in found.items()} == {
            p: [p] for p in pods
        }, f"{kind}: {found}"
    # the pool's policy opens what the default pool's opens; the store takes every pool's S3
    policy = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "NetworkPolicy"}
    assert policy[GPU]["ingress"] == policy[WORKER]["ingress"]
    assert policy[GPU]["egress"] == policy[WORKER]["egress"]
    peers = [
        p["podSelector"]["matchLabels"]
        for p in policy[f"{RELEASE}-recall-store"]["ingress"][0]["from"]
    ]
    for labels in pods.values():
        assert any(matches(peer, labels) for peer in peers), labels
    # the pool's metrics Service carries its pool: the ServiceMonitor keeps it as a label
    assert (
        find(docs, "Service", "-worker-gpu-metrics")["metadata"]["labels"]["recall.dev/pool"]
        == "gpu"
    )


def test_template_service_monitor__a_pools_series_are_the_workers_with_their_pool(
    tools: Tools, tmp_path: Path
) -> None:
    docs = tools.render(
        tmp_path, merged(WITH_GPU, {"metrics": {"serviceMonitor": {"enabled": True}}})
    )
    relabelings = find(docs, "ServiceMonitor")["spec"]["endpoints"][0]["relabelings"]
    pool_label = "__meta_kubernetes_service_label_recall_dev_pool"
    component = "__meta_kubernetes_service_label_app_kubernetes_io_component"
    assert relabelings[0] == {"sourceLabels": [component], "targetLabel": "component"}
    by_target = {r["targetLabel"]: r for r in relabelings[1:]}
    assert by_target["pool"]["sourceLabels"] == [pool_label]
    assert by_target["component"] == {
        "sourceLabels": [pool_label], "regex": ".+", "targetLabel": "component",
        "replacement": "worker",
    }  # fmt: skip


def operator_settings(
    docs: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> OperatorSettings:
    """The settings the rendered operator container would read from its environment."""
    env = env_of(container(find(docs, "Deployment", "-operator")))
    for name in [n for n in os.environ if n.startswith("RECALL_OPERATOR_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        if name.startswith("RECALL_OPERATOR_") and isinstance(value, str):
            monkeypatch.setenv(name, value)
    return OperatorSettings()


def test_template_builtin__the_operator_scales_each_pool_by_what_it_reads(
    tools: Tools, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = merged(
        WITH_GPU,
        {
            "engine": {"name": "simulated"},
            "worker": {"slots": 2, "autoscaling": {"mode": "builtin", "maxReplicas": 6}},
        },
        {"pools": [GPU_POOL, {"name": "spot", "engine": {"name": "whisper"}}]},
    )
    docs = tools.render(tmp_path, values)
    pools = {p.pool: p for p in operator_settings(docs, monkeypatch).scaled_pools()}
    assert {name: p.model_dump() for name, p in pools.items()} == {
        "default": {"pool": "default", "deployment": WORKER, "engine": "simulated", "min": 0,
                    "max": 6, "slots": 2},
        "gpu": {"pool": "gpu", "deployment": GPU, "engine": "simulated", "min": 0, "max": 3,
                "slots": 4},
        "spot": {"pool": "spot", "deployment": f"{WORKER}-spot", "engine": "whisper", "min": 0,
                 "max": 6, "slots": 2},
    }  # fmt: skip
    for deployment in workers(docs):
        assert deployment["metadata"]["labels"]["recall.dev/autoscaling"] == "builtin"
        assert "replicas" not in deployment["spec"], "the autoscaler owns the count"
    role = find(docs, "Role", "-operator-scaler")
    for rule in role["rules"][:2]:
        assert rule["resourceNames"] == [WORKER, GPU, f"{WORKER}-spot"]
    # without pools the operator reads none
    plain = tools.render(tmp_path, {"worker": {"autoscaling": {"mode": "builtin"}}})
    env = env_of(container(find(plain, "Deployment", "-operator")))
    assert "RECALL_OPERATOR_AUTOSCALE_POOLS" not in env
    assert env["RECALL_OPERATOR_AUTOSCALE_SLOTS"] == "1"


def test_template_keda__a_scaled_object_per_pool_its_target_the_pools_slots(
    tools: Tools, tmp_path: Path, control_plane: ControlPlane, keda_crd: Path, namespace: str
) -> None:
    """Rendered, and accepted by KEDA's own CRD schema on the real API server."""
    values = merged(WITH_GPU, {"worker": {"autoscaling": {"mode": "keda"}}})
    out = tools.ok(
        "helm", "template", RELEASE, str(CHART), "--namespace", namespace, "--skip-tests",
        "--api-versions", "keda.sh/v1alpha1", "--values", str(values_file(tmp_path, values)),
        "--show-only", "templates/worker-scaledobject.yaml",
    )  # fmt: skip
    accepted = tools.ok(
        "kubectl", "apply", "--dry-run=server", "-f", "-",
        kubeconfig=control_plane.kubeconfig, stdin=out,
    )  # fmt: skip
    assert f"scaledobject.keda.sh/{GPU} created (server dry run)" in accepted, accepted
    docs = [d for d in yaml.safe_load_all(out) if d]
    objects = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "ScaledObject"}
    assert set(objects) == {WORKER, GPU}
    gpu = objects[GPU]
    assert gpu["scaleTargetRef"]["name"] == GPU
    assert (gpu["minReplicaCount"], gpu["maxReplicaCount"]) == (0, 3)
    trigger = gpu["triggers"][0]["metadata"]
    assert trigger["targetValue"] == "4"
    assert trigger["url"].endswith(f"/workload?namespace={namespace}&engine=whisper&pool=gpu")
    assert objects[WORKER]["triggers"][0]["metadata"]["targetValue"] == "1"


def test_template_pool_image__a_pool_that_names_an_image_gets_it_alone(
    tools: Tools, tmp_path: Path
) -> None:
    def image(pool_image: dict[str, str] | None) -> str:
        pool = {"name": "gpu", **({"image": pool_image} if pool_image is not None else {})}
        docs = tools.render(
            tmp_path, {"image": {"digest": DIGEST, "tag": "9.9.9"}, "pools": [pool]}
        )
        return str(container(find(docs, "Deployment", "-worker-gpu"))["image"])

    assert image(None) == f"recall@{DIGEST}"  # nothing of its own: the chart's image
    assert image({"pullPolicy": "Never"}) == f"recall@{DIGEST}"
    assert image({"tag": "0.2.0-cuda"}) == "recall:0.2.0-cuda"
    assert (
        image({"repository": "registry.example/recall-cuda"})
        == "registry.example/recall-cuda:0.2.0"
    )
    other = "sha256:" + "cd" * 32
    assert image({"repository": "r/cuda", "digest": other}) == f"r/cuda@{other}"


@pytest.mark.parametrize(
    ("pools", "extra", "message"),
    [
        ([{"name": "gpu"}, {"name": "gpu"}], [], "two pools are named gpu"),
        ([{"name": "gpu", "graceSeconds": 30, "terminationGracePeriodSeconds": 20}], [],
         "pools[gpu].terminationGracePeriodSeconds (20) must be longer than its graceSeconds"),
        ([{"name": "gpu", "autoscaling": {"minReplicas": 5, "maxReplicas": 2}}],
         ["--set", "worker.autoscaling.mode=builtin"],
         "pools[gpu].autoscaling.minReplicas (5) must not exceed its maxReplicas (2)"),
        ([{"name": "gpu", "extraEnv": [{"name": "RECALL_WORKER_ID", "value": "w"}]}],
         ["--set", "worker.autoscaling.mode=builtin"],
         "pools[gpu]: workers are named by their pods"),
        ([{"name": "gpu"}], ["--set", "worker.enabled=false"], "pools need worker.enabled"),
        ([{"name": "a" * 50}], [], "would be longer than 63 characters"),
    ],
)  # fmt: skip
def test_template_pools__contradicting_values_fail_naming_the_pool(
    tools: Tools, tmp_path: Path, pools: list[dict[str, Any]], extra: list[str], message: str
) -> None:
    path = values_file(tmp_path, {"pools": pools})
    out = tools.run("helm", "template", RELEASE, str(CHART), "--values", str(path), *extra)
    assert out.returncode != 0 and message in out.stderr, out.stderr


@pytest.mark.parametrize(
    ("pool", "where", "why"),
    [
        ({"name": "default"}, "/pools/0/name", "not"),
        ({"name": "GPU"}, "/pools/0/name", "does not match"),
        ({"slots": 2}, "/pools/0", "missing property 'name'"),
        ({"name": "gpu", "slot": 2}, "/pools/0", "'slot' not allowed"),
        ({"name": "gpu", "slots": 0}, "/pools/0/slots", "minimum"),
        ({"name": "gpu", "device": "tpu"}, "/pools/0/device", "must be one of"),
        ({"name": "gpu", "autoscaling": {"mode": "keda"}}, "/pools/0/autoscaling",
         "'mode' not allowed"),
        ({"name": "gpu", "engine": {"name": "gpt"}}, "/pools/0/engine/name", "must be one of"),
    ],
)  # fmt: skip
def test_schema__rejects_a_bad_pool_naming_it(
    tools: Tools, tmp_path: Path, pool: dict[str, Any], where: str, why: str
) -> None:
    path = values_file(tmp_path, {"pools": [pool]})
    out = tools.run("helm", "template", RELEASE, str(CHART), "--values", str(path))
    assert out.returncode != 0, f"{pool} was accepted"
    assert "don't meet the specifications of the schema" in out.stderr
    assert f"at '{where}'" in out.stderr and why in out.stderr, out.stderr


def test_helm_lint__passes_with_a_gpu_pool(tools: Tools, tmp_path: Path) -> None:
    path = values_file(tmp_path, merged(WITH_GPU, OPT_INS))
    tools.ok("helm", "lint", "--strict", str(CHART), "--values", str(path))
    # hack/chart-lint.sh's kube-score run sees a GPU pool too (test_chart.py runs it)
    everything = yaml.safe_load(
        (ROOT / "hack" / "chart-lint" / "values-everything.yaml").read_text()
    )
    assert any(
        "nvidia.com/gpu" in (p.get("resources") or {}).get("limits", {})
        for p in everything["pools"]
    )


# --- on the real API server ---------------------------------------------------------------------


def helm(tools: Tools, cp: ControlPlane, namespace: str, *args: str, chart: Path = CHART) -> str:
    return tools.ok(
        "helm", *args, RELEASE, str(chart), "--namespace", namespace,
        "--set", "crds.install=false",  # the session's CRDs are not this release's
        kubeconfig=cp.kubeconfig,
    )  # fmt: skip


@pytest.fixture
def uninstalled(tools: Tools, control_plane: ControlPlane, namespace: str) -> Iterator[None]:
    """The test's release is uninstalled at its end: its cluster-scoped objects (the API
    Priority and Fairness ones) would otherwise stand in the way of the next test's release."""
    yield
    tools.run("helm", "uninstall", RELEASE, "--namespace", namespace, "--wait",
              kubeconfig=control_plane.kubeconfig)  # fmt: skip


def pool_job(name: str, pool: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "source": {"url": "file:///media/sample.wav"},
        "engine": {"name": "simulated"},
        "leaseDurationSeconds": 10,
    }
    if pool:
        spec["pool"] = pool
    return {"apiVersion": API_VERSION, "kind": "TranscriptionJob",
            "metadata": {"name": name}, "spec": spec}  # fmt: skip


@pytest.mark.slow
def test_install__the_real_operator_scales_each_pool_on_its_own_work(
    tools: Tools,
    control_plane: ControlPlane,
    api: client.ApiClient,
    kube: Kube,
    namespace: str,
    procs: Procs,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    uninstalled: None,
) -> None:
    """`helm install` with a GPU pool (3 slots a worker) and the default pool, builtin mode;
    the operator runs here as the chart's ServiceAccount with the chart's environment. No pod
    runs (no kubelet): the counts are the API's truth."""
    gpu_pool = {**GPU_POOL, "slots": 3}
    values = merged(
        {"pools": [gpu_pool], "engine": {"name": "simulated"}},
        {"worker": {"autoscaling": {"mode": "builtin", "maxReplicas": 2, "cooldownSeconds": 1,
                                    "builtin": {"intervalSeconds": 0.5}}}},
    )  # fmt: skip
    path = values_file(tmp_path, values)
    notes = helm(tools, control_plane, namespace, "install", "--values", str(path))
    assert f"pool gpu: {GPU} (0 to 3 replica(s) of 3 slot(s), engine simulated)" in notes, notes
    apps = client.AppsV1Api(api)
    live = {d.metadata.name: d for d in apps.list_namespaced_deployment(namespace).items}
    assert {WORKER, GPU} <= set(live)
    # the pods the operator's default-pool scaler lists (its scale's selector): not the pool's
    scale = kube.get_scale(namespace, WORKER)
    assert scale is not None and "app.kubernetes.io/component=worker" in scale.selector.split(",")
    for verb in ("get", "patch"):
        assert can_i(
            api, namespace, f"{RELEASE}-recall-operator", verb, f"deployments.apps/{GPU}", "scale"
        )

    docs = tools.render(tmp_path, values, namespace=namespace)
    env = {
        k: v
        for k, v in env_of(container(find(docs, "Deployment", "-operator"))).items()
        if k.startswith("RECALL_OPERATOR_AUTOSCALE_") and isinstance(v, str)
    }
    account = f"{RELEASE}-recall-operator"
    kubeconfig = token_kubeconfig(
        control_plane, service_account_token(api, namespace, account),
        tmp_path / "operator.kubeconfig", namespace, f"system:serviceaccount:{namespace}:{account}",
    )  # fmt: skip
    procs.recall(
        "operator", "operator", "--namespace", namespace,
        env={**env, "KUBECONFIG": str(kubeconfig)},
    )  # fmt: skip

    # No Deployment controller runs here (no pods either): this thread writes what it would
    # write of a Deployment without pods, that it has seen its generation, or the operator
    # would hold every scale-down as a rollout in progress.
    stop = threading.Event()

    def observe() -> None:
        while not stop.wait(0.3):
            for d in apps.list_namespaced_deployment(namespace).items:
                if (d.status.observed_generation or 0) < d.metadata.generation:
                    status = {"observedGeneration": d.metadata.generation, "replicas": 0}
                    with contextlib.suppress(client.ApiException):
                        apps.patch_namespaced_deployment_status(
                            d.metadata.name, namespace, {"status": status}
                        )

    observer = threading.Thread(target=observe, name="deployment-observer", daemon=True)
    observer.start()

    def stop_observing() -> None:
        stop.set()
        observer.join(5)

    request.addfinalizer(stop_observing)

    def replicas(name: str) -> int | None:
        return apps.read_namespaced_deployment(name, namespace).spec.replicas  # type: ignore[no-any-return]

    def counts(gpu: int, default: int) -> bool:
        return (replicas(GPU), replicas(WORKER)) == (gpu, default)

    def why() -> str:
        status = {
            name: (replicas(name), (d.metadata.annotations or {}).get(STATUS_ANNOTATION))
            for name in (GPU, WORKER)
            for d in [apps.read_namespaced_deployment(name, namespace)]
        }
        return f"{status}\n{procs.dump()}"

    # A fresh install sets no count (the API server's default is 1): nothing to do, both to zero.
    wait_for(lambda: counts(0, 0), timeout=90, interval=0.5, message=why)
    gpu_jobs = 7
    for k in range(gpu_jobs):
        kube.create_job(namespace, pool_job(f"gpu-{k}", "gpu"))
    wanted = math.ceil(gpu_jobs / gpu_pool["slots"])  # 3: within its maxReplicas of 3
    wait_for(lambda: counts(wanted, 0), timeout=60, interval=0.5, message=why)
    for k in range(3):
        kube.create_job(namespace, pool_job(f"cpu-{k}", None))
    wait_for(lambda: counts(wanted, 2), timeout=60, interval=0.5, message=why)  # max 2
    line = fleet_line(
        api.sanitize_for_serialization(apps.read_namespaced_deployment(GPU, namespace))
    )
    assert line.startswith(f"workers {GPU} (pool gpu): 3 × 3 slots = 9"), line
    for k in range(gpu_jobs):
        kube.delete_job(namespace, f"gpu-{k}")
    wait_for(lambda: counts(0, 2), timeout=60, interval=0.5, message=why)
    assert "forbidden" not in procs.started[0].log.read_text(errors="replace").lower()


def test_upgrade__from_the_previous_release_adds_a_pool_and_keeps_the_default_selector(
    tools: Tools,
    control_plane: ControlPlane,
    api: client.ApiClient,
    namespace: str,
    tmp_path: Path,
    uninstalled: None,
) -> None:
    from recall_dev.release import changelog_entries

    version, commit = changelog_entries()[1]
    assert commit, f"CHANGELOG.md's {version} names no commit"
    archive = subprocess.run(
        ["git", "archive", commit, "charts/recall"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    previous = tmp_path / "previous"
    previous.mkdir()
    subprocess.run(["tar", "-x", "-C", str(previous)], input=archive, check=True)
    helm(tools, control_plane, namespace, "install", chart=previous / "charts" / "recall")
    apps = client.AppsV1Api(api)
    before = apps.read_namespaced_deployment(WORKER, namespace).spec.selector.match_labels
    path = values_file(tmp_path, {"pools": [GPU_POOL]})
    helm(tools, control_plane, namespace, "upgrade", "--values", str(path))
    after = apps.read_namespaced_deployment(WORKER, namespace)
    assert after.spec.selector.match_labels == before
    assert after.spec.template.metadata.labels["recall.dev/pool"] == "default"
    gpu = apps.read_namespaced_deployment(GPU, namespace)
    assert not matches(before, gpu.spec.template.metadata.labels)
    assert gpu.metadata.annotations["recall.dev/slots"] == "4"
