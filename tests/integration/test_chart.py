"""The Helm chart: lint, render, validate against the real API server, and run the system as
the chart's ServiceAccounts.

- `helm lint` (also `--strict`) with the defaults and with every option on; the schema
  rejects bad values with a message naming the value.
- The rendered manifests pass `kubectl apply --dry-run=server` (admission, CRD schemas,
  RBAC escalation checks); the ServiceMonitor, whose CRD this server lacks, is checked as YAML.
- The chart's CRD templates are the repository's crds/ (a byte-identical copy in
  charts/recall/files/crds/, rendered unchanged but for the keep annotation).
- The chart's CRDs, ServiceAccounts and RBAC are applied for real; the operator and two
  workers run as local processes authenticated with TokenRequest tokens of those
  ServiceAccounts, and a Batch completes. A `kubectl auth can-i` matrix shows each
  ServiceAccount can do what its component needs and nothing more.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from recall.bucket import Bucket
from recall.kube.client import KubeClient as Kube
from recall.resources import BATCH_PLURAL, GROUP, VERSION, BatchStatus, Phase
from recall_dev.cluster import ControlPlane
from tests.helpers import Procs, built, get_batch, list_jobs, run_captured, wait_for
from tests.rbac import service_account_token, token_kubeconfig

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "recall"
RELEASE = "rc"
# What the real-run test installs: everything but the Deployments and Services (the
# components run here as local processes instead).
INSTALL_KINDS = {
    "CustomResourceDefinition",
    "ServiceAccount",
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
}
# Every option on: HA operator watching every namespace, OpenAI engine with a key Secret,
# a media volume, the ServiceMonitor.
EVERYTHING: dict[str, Any] = {
    "engine": {"name": "openai", "openai": {"apiKeySecret": {"name": "openai", "key": "token"}}},
    "operator": {"replicas": 2, "clusterWide": True},
    "worker": {
        "replicas": 3,
        "mediaVolume": {"persistentVolumeClaim": {"claimName": "recordings"}},
        "mediaMountPath": "/recordings",
    },
    "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
}
NO_SERVICE_MONITOR: dict[str, Any] = {"metrics": {"serviceMonitor": {"enabled": False}}}


@dataclass(frozen=True)
class Tools:
    """helm and kubectl from hack/k8s-tools, with their caches in a temporary directory."""

    bin: Path
    env: dict[str, str]

    def run(
        self, tool: str, *args: str, kubeconfig: Path | None = None, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = dict(self.env)
        if kubeconfig is not None:
            env["KUBECONFIG"] = str(kubeconfig)
        return run_captured([self.bin / tool, *args], timeout=60, input=stdin, env=env, cwd=ROOT)

    def ok(self, tool: str, *args: str, **kwargs: Any) -> str:
        out = self.run(tool, *args, **kwargs)
        assert out.returncode == 0, f"{tool} {' '.join(args)}:\n{out.stdout}\n{out.stderr}"
        return out.stdout

    def render(
        self, tmp: Path, values: dict[str, Any] | None = None, namespace: str = "recall"
    ) -> list[dict[str, Any]]:
        """The chart's manifests, as `helm template` renders them (without `helm test`'s pod,
        which test_doctor.py checks)."""
        args = ["template", RELEASE, str(CHART), "--namespace", namespace, "--skip-tests"]
        if values is not None:
            args += ["--values", str(values_file(tmp, values))]
        return [d for d in yaml.safe_load_all(self.ok("helm", *args)) if d]


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Tools:
    bin_dir = built(ROOT / "hack" / "k8s-tools" / "build.sh", timeout=1800)
    home = tmp_path_factory.mktemp("tools-home")
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env.update(
        HELM_CACHE_HOME=str(home / "helm-cache"),
        HELM_CONFIG_HOME=str(home / "helm-config"),
        HELM_DATA_HOME=str(home / "helm-data"),
        KUBECACHEDIR=str(home / "kube-cache"),
        HOME=str(home),
    )
    return Tools(bin_dir, env)


def values_file(tmp: Path, values: dict[str, Any]) -> Path:
    digest = hashlib.sha1(json.dumps(values, sort_keys=True).encode()).hexdigest()[:10]
    path = tmp / f"values-{digest}.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def merged(*layers: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merged(out[key], value)
            else:
                out[key] = value
    return out


def find(docs: list[dict[str, Any]], kind: str, suffix: str = "") -> dict[str, Any]:
    hits = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
    assert len(hits) == 1, f"{len(hits)} {kind} objects named *{suffix}"
    return hits[0]


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    result: dict[str, Any] = containers[0]
    return result


def env_of(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}


def repo_crds() -> dict[str, dict[str, Any]]:
    docs = [
        d for p in sorted((ROOT / "crds").glob("*.yaml")) for d in yaml.safe_load_all(p.read_text())
    ]
    return {d["metadata"]["name"]: d for d in docs if d}


# --- CRDs: the chart's are the repository's ------------------------------------------------


def test_chart_crd_copy__byte_identical_to_repo_crds() -> None:
    repo = {p.name: p.read_bytes() for p in (ROOT / "crds").glob("*.yaml")}
    chart = {p.name: p.read_bytes() for p in (CHART / "files" / "crds").glob("*.yaml")}
    fix = "run: cp crds/*.yaml charts/recall/files/crds/"
    assert sorted(chart) == sorted(repo), f"the chart's CRD files differ from crds/ ({fix})"
    for name, content in repo.items():
        assert chart[name] == content, f"charts/recall/files/crds/{name} differs ({fix})"


def test_rendered_crds__are_the_repo_crds_with_the_keep_annotation(
    tools: Tools, tmp_path: Path
) -> None:
    expected = repo_crds()
    assert len(expected) == 2  # transcriptionjobs, batches

    kept = {
        d["metadata"]["name"]: d
        for d in tools.render(tmp_path)
        if d["kind"] == "CustomResourceDefinition"
    }
    assert sorted(kept) == sorted(expected)
    for name, crd in kept.items():
        annotations = crd["metadata"].pop("annotations")
        assert annotations == {"helm.sh/resource-policy": "keep"}
        assert crd == expected[name], f"the rendered {name} is not crds/'s"

    plain = tools.render(tmp_path, {"crds": {"keep": False}})
    rendered = {d["metadata"]["name"]: d for d in plain if d["kind"] == "CustomResourceDefinition"}
    assert rendered == expected

    none = tools.render(tmp_path, {"crds": {"install": False}})
    assert not [d for d in none if d["kind"] == "CustomResourceDefinition"]


# --- lint, schema, render ----------------------------------------------------------------


def test_helm_lint__passes_with_defaults_and_with_everything_on(
    tools: Tools, tmp_path: Path
) -> None:
    tools.ok("helm", "lint", str(CHART))
    tools.ok("helm", "lint", "--strict", str(CHART))
    everything = values_file(tmp_path, EVERYTHING)
    tools.ok("helm", "lint", "--strict", str(CHART), "--values", str(everything))
    tools.ok("helm", "lint", "--strict", str(CHART), "--set", "engine.name=simulated")


@pytest.mark.parametrize(
    ("args", "where", "why"),
    [
        (["--set", "worker.replicas=-1"], "/worker/replicas", "minimum"),
        (["--set", "engine.name=gpt"], "/engine/name", "must be one of"),
        (["--set", "engine=gpt"], "/engine", "want object"),
        (["--set", "worker.replica=3"], "/worker", "'replica' not allowed"),
        (["--set", "operator.metricsPort=70000"], "/operator/metricsPort", "maximum"),
        (["--set", "image.pullPolicy=Sometimes"], "/image/pullPolicy", "must be one of"),
        (["--set", "log.format=xml"], "/log/format", "must be one of"),
    ],
)
def test_schema__rejects_a_bad_value_naming_it(
    tools: Tools, args: list[str], where: str, why: str
) -> None:
    out = tools.run("helm", "template", RELEASE, str(CHART), *args)
    assert out.returncode != 0, f"{args} was accepted"
    assert "don't meet the specifications of the schema" in out.stderr
    assert f"at '{where}'" in out.stderr and why in out.stderr, out.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--set", "worker.terminationGracePeriodSeconds=10"],
            "must be longer than worker.graceSeconds",
        ),
        (["--set-json", "operator.reconcileInterval=0.5"], "at least two ticks"),
        (["--set", "operator.enabled=false"], "does not bundle a store: set store.url"),
    ],
)
def test_template__fails_on_contradicting_values(
    tools: Tools, args: list[str], message: str
) -> None:
    out = tools.run("helm", "template", RELEASE, str(CHART), *args)
    assert out.returncode != 0 and message in out.stderr, out.stderr


def test_template_defaults__least_privilege_secure_pods(tools: Tools, tmp_path: Path) -> None:
    docs = tools.render(tmp_path)
    kinds = sorted(d["kind"] for d in docs if d["kind"] != "CustomResourceDefinition")
    assert kinds == sorted(
        ["ServiceAccount"] * 3  # the operator's, the workers', `helm test`'s doctor's
        + ["ClusterRole"] * 3  # the user roles (aggregated to view, edit, admin), the doctor's
        + ["ClusterRoleBinding"]  # the doctor's: it reads the CRDs and API fairness objects
        + ["Role"] * 3
        + ["RoleBinding"] * 4  # the doctor's own, and tests.doctor.userRole's
        + ["Service"] * 3  # the two metrics Services and the bundled store's
        + ["Deployment"] * 3  # the operator, the workers and the bundled store
        + ["Secret"] * 3  # the store's identities, the operator's and the workers' keys
        + ["PersistentVolumeClaim"]  # the store's data
        + ["FlowSchema", "PriorityLevelConfiguration"] * 2  # API Priority and Fairness
        # the event sinks' policy: no loopback, link-local or metadata host, only named Secrets
        + ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    )
    for doc in docs:
        labels = doc["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/name") == "recall", doc["metadata"]["name"]
        if doc["kind"] != "CustomResourceDefinition":
            assert labels["app.kubernetes.io/instance"] == RELEASE
            assert labels["app.kubernetes.io/managed-by"] == "Helm"

    operator = find(docs, "Deployment", "-operator")
    worker = find(docs, "Deployment", "-worker")
    for deployment in (operator, worker, find(docs, "Deployment", "-store")):
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        security = container(deployment)["securityContext"]
        assert security["readOnlyRootFilesystem"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"]["drop"] == ["ALL"]
        tmp = next(v for v in pod["volumes"] if v["name"] == "tmp")
        assert "emptyDir" in tmp
        assert {"name": "tmp", "mountPath": "/tmp"} in container(deployment)["volumeMounts"]
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()

    assert operator["spec"]["strategy"] == {"type": "Recreate"}
    assert operator["spec"]["replicas"] == 1
    op = container(operator)
    assert op["args"] == ["operator"]
    op_env = env_of(op)
    assert op_env["RECALL_OPERATOR_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert "RECALL_OPERATOR_PEERING" not in op_env  # one replica: standalone
    assert op_env["RECALL_LOG_FORMAT"] == "json"
    assert op["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    ports = {p["name"]: p["containerPort"] for p in op["ports"]}
    assert str(ports["healthz"]) == op_env["RECALL_OPERATOR_LIVENESS_PORT"]
    assert str(ports["metrics"]) == op_env["RECALL_OPERATOR_METRICS_PORT"]

    wk = container(worker)
    assert wk["args"] == ["worker"]
    wk_env = env_of(wk)
    assert wk_env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert wk_env["RECALL_WORKER_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert wk_env["RECALL_WORKER_ENGINE"] == "whisper"
    assert "RECALL_WORKER_OPENAI_API_KEY_FILE" not in wk_env
    grace = float(wk_env["RECALL_WORKER_GRACE_SECONDS"])
    assert worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= grace + 15
    # No media volume by default; the model cache (test_chart_models.py); the bundled store's
    # worker identity (scratch/ only).
    assert [m["name"] for m in wk["volumeMounts"]] == ["tmp", "model-cache", "store-credentials"]
    assert wk_env["RECALL_STORE_URL"] == "s3://recall/"
    assert wk_env["RECALL_STORE_CREDENTIALS_DIR"] == "/var/run/secrets/recall/store"
    assert (
        wk_env["AWS_ENDPOINT_URL"].startswith("http://")
        and ".svc:8333" in wk_env["AWS_ENDPOINT_URL"]
    )
    store_secret = {
        v["name"]: v["secret"]["secretName"]
        for v in worker["spec"]["template"]["spec"]["volumes"]
        if "secret" in v
    }["store-credentials"]
    assert store_secret.endswith("-store-worker")

    sa = {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"}
    assert operator["spec"]["template"]["spec"]["serviceAccountName"] in sa
    assert worker["spec"]["template"]["spec"]["serviceAccountName"] in sa
    worker_role = find(docs, "Role", "-worker")
    assert worker_role["rules"] == [
        {
            "apiGroups": [GROUP],
            "resources": ["transcriptionjobs"],
            "verbs": ["get", "list", "watch"],
        },
        {
            "apiGroups": [GROUP],
            "resources": ["transcriptionjobs/status"],
            "verbs": ["patch", "update"],
        },
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "create", "update", "delete"],
        },
    ]
    operator_rules = find(docs, "Role", "-operator")["rules"]
    # Secrets: `get` on the sinks' key Secrets by name only (notify.secretNames), nothing else.
    secrets = [r for r in operator_rules if "secrets" in r["resources"]]
    assert secrets == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["recall-notify"],
            "verbs": ["get"],
        }
    ]
    configmaps = [r for r in operator_rules if "configmaps" in r["resources"]]
    # Read item lists (the bytes are in the store); write only the usage record by name.
    assert {v for r in configmaps if "resourceNames" not in r for v in r["verbs"]} == {
        "get",
        "create",
    }
    assert all(r["resourceNames"] == ["recall-usage"] for r in configmaps if "resourceNames" in r)


def test_template_store__bundled_by_default_a_bucket_of_your_own_otherwise(
    tools: Tools, tmp_path: Path
) -> None:
    docs = tools.render(tmp_path)
    store = find(docs, "Deployment", "-store")
    args = container(store)["args"]
    assert args[:2] == ["-logtostderr", "mini"] and "-s3.config=/etc/recall-store/s3.json" in args
    # The store makes its bucket at every start and is ready only once it has it; no write
    # creates one (the fresh-install hang: the operator's one probe write raced the store).
    assert "-bucket=recall" in args and "-s3.autoCreateBucket=false" in args
    probes = container(store)
    for probe in ("readinessProbe", "livenessProbe"):
        assert probes[probe]["httpGet"]["path"].startswith("/buckets/recall")
        assert probes[probe]["httpGet"]["port"] == "filer"
    claim = find(docs, "PersistentVolumeClaim", "-store")
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    identities = json.loads(find(docs, "Secret", "-store-identities")["stringData"]["s3.json"])
    worker = next(i for i in identities["identities"] if i["name"] == "worker")
    assert worker["actions"] == ["Read:recall/scratch/*", "Write:recall/scratch/*", "List:recall"]
    keys = {d["metadata"]["name"]: d["stringData"] for d in docs if d["kind"] == "Secret"}
    wk = next(v for k, v in keys.items() if k.endswith("-store-worker"))
    assert wk["AWS_ACCESS_KEY_ID"] == worker["credentials"][0]["accessKey"]

    own = tools.render(
        tmp_path,
        {
            "store": {
                "url": "s3://prod-results/recall",
                "bundled": {"enabled": False},
                "workerSecret": "results-worker",
                "operatorSecret": "results-operator",
                "env": [{"name": "AWS_REGION", "value": "eu-west-1"}],
            }
        },
    )
    assert not [d for d in own if d["metadata"]["name"].endswith(("-store", "-identities"))]
    for component, secret in (("-worker", "results-worker"), ("-operator", "results-operator")):
        deployment = find(own, "Deployment", component)
        env = env_of(container(deployment))
        assert env["RECALL_STORE_URL"] == "s3://prod-results/recall"
        assert env["AWS_REGION"] == "eu-west-1" and "AWS_ENDPOINT_URL" not in env
        volumes = deployment["spec"]["template"]["spec"]["volumes"]
        assert {
            "name": "store-credentials",
            "secret": {"secretName": secret, "defaultMode": 288},
        } in volumes

    none = tools.run(
        "helm", "template", RELEASE, str(CHART), "--set", "store.bundled.enabled=false"
    )
    assert none.returncode != 0 and "store.url is empty" in none.stderr


def test_template_everything__cluster_wide_ha_operator_and_configured_workers(
    tools: Tools, tmp_path: Path
) -> None:
    docs = tools.render(tmp_path, EVERYTHING)
    assert not [
        d
        for d in docs
        if d["kind"] in ("Role", "RoleBinding") and "-operator" in d["metadata"]["name"]
    ]
    role = find(docs, "ClusterRole", "-operator")
    binding = find(docs, "ClusterRoleBinding", "-operator")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    leases = next(r for r in role["rules"] if r["apiGroups"] == ["coordination.k8s.io"])
    assert leases["resources"] == ["leases"]

    operator = find(docs, "Deployment", "-operator")
    assert operator["spec"]["replicas"] == 2
    op_env = env_of(container(operator))
    assert "RECALL_OPERATOR_NAMESPACE" not in op_env  # unset: cluster-wide
    assert op_env["RECALL_OPERATOR_LEADER_ELECTION"] == "true"  # two replicas elect a leader
    assert op_env["RECALL_OPERATOR_LEADER_ELECTION_NAME"] == f"{RELEASE}-recall-operator"

    worker = find(docs, "Deployment", "-worker")
    assert worker["spec"]["replicas"] == 3
    pod = worker["spec"]["template"]["spec"]
    wk = container(worker)
    mounts = {m["name"]: m for m in wk["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["media"] == {"name": "media", "mountPath": "/recordings", "readOnly": True}
    assert volumes["media"]["persistentVolumeClaim"] == {"claimName": "recordings"}
    key_mount = mounts["openai-api-key"]
    assert key_mount["readOnly"] is True
    assert volumes["openai-api-key"]["secret"]["secretName"] == "openai"
    assert volumes["openai-api-key"]["secret"]["items"][0]["key"] == "token"
    key_path = volumes["openai-api-key"]["secret"]["items"][0]["path"]
    wk_env = env_of(wk)
    assert wk_env["RECALL_WORKER_ENGINE"] == "openai"
    assert wk_env["RECALL_WORKER_OPENAI_API_KEY_FILE"] == f"{key_mount['mountPath']}/{key_path}"

    monitor = find(docs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    selector = monitor["spec"]["selector"]["matchLabels"]
    services = [d for d in docs if d["kind"] == "Service"]
    selected = [s for s in services if selector.items() <= s["metadata"]["labels"].items()]
    assert {s["metadata"]["labels"]["app.kubernetes.io/component"] for s in selected} == {
        "operator",
        "worker",
    }
    scraped_ports = {e["port"] for e in monitor["spec"]["endpoints"]}
    for service in selected:
        assert scraped_ports <= {p["name"] for p in service["spec"]["ports"]}
        component = service["metadata"]["labels"]["app.kubernetes.io/component"]
        deployment = find(docs, "Deployment", f"-{component}")
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= pod_labels.items()
        assert {p["name"] for p in container(deployment)["ports"]} >= {"metrics"}


def test_template_switches__rbac_service_accounts_and_components(
    tools: Tools, tmp_path: Path
) -> None:
    no_rbac = tools.render(tmp_path, {"rbac": {"create": False}})
    assert not [d for d in no_rbac if d["kind"] in ("Role", "RoleBinding", "ClusterRole")]

    own_accounts = tools.render(
        tmp_path,
        {
            "operator": {"serviceAccount": {"create": False, "name": "ops"}},
            "worker": {"serviceAccount": {"create": False, "name": "transcriber"}},
        },
    )
    assert [d["metadata"]["name"] for d in own_accounts if d["kind"] == "ServiceAccount"] == [
        f"{RELEASE}-recall-doctor"  # `helm test`'s: tests.doctor.enabled=false leaves it out
    ]
    for component, account in (("operator", "ops"), ("worker", "transcriber")):
        pod = find(own_accounts, "Deployment", f"-{component}")["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == account
        binding = find(own_accounts, "RoleBinding", f"-{component}")
        assert binding["subjects"][0]["name"] == account

    shared = {"url": "s3://results/", "bundled": {"enabled": False}, "workerSecret": "w"}
    workers_only = tools.render(
        tmp_path, {"operator": {"enabled": False}, "crds": {"install": False}, "store": shared}
    )
    components = {d["metadata"]["labels"]["app.kubernetes.io/component"] for d in workers_only}
    # its workers' lease writes keep their seats; `helm test`'s doctor checks it
    assert components == {"worker", "api-fairness", "doctor"}

    elected = tools.render(tmp_path, {"operator": {"leaderElection": {"enabled": True}}})
    op_env = env_of(container(find(elected, "Deployment", "-operator")))
    assert op_env["RECALL_OPERATOR_LEADER_ELECTION"] == "true"
    assert op_env["RECALL_OPERATOR_LEADER_ELECTION_NAMESPACE"]
    single = tools.render(tmp_path)
    assert "RECALL_OPERATOR_LEADER_ELECTION" not in env_of(
        container(find(single, "Deployment", "-operator"))
    )


# --- against the real API server ----------------------------------------------------------


def test_dry_run_server__rendered_chart_and_examples_are_accepted(
    tools: Tools, control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    for values in ({}, merged(EVERYTHING, NO_SERVICE_MONITOR)):
        rendered = tools.ok(
            "helm",
            "template",
            RELEASE,
            str(CHART),
            "--namespace",
            namespace,
            "--values",
            str(values_file(tmp_path, values)),
            # helm test's pod: test_doctor.py sends it to the API server on its own.
            "--skip-tests",
        )
        out = tools.ok(
            "kubectl",
            "apply",
            "--dry-run=server",
            "-f",
            "-",
            kubeconfig=control_plane.kubeconfig,
            stdin=rendered,
        )
        assert "deployment.apps/rc-recall-worker created (server dry run)" in out, out
        assert "deployment.apps/rc-recall-operator created (server dry run)" in out, out
    out = tools.ok(
        "kubectl",
        "apply",
        "--dry-run=server",
        "-n",
        namespace,
        "-f",
        str(ROOT / "examples"),
        kubeconfig=control_plane.kubeconfig,
    )
    assert out.count("created (server dry run)") == 5, out


def test_notes__tell_how_to_submit_and_watch_a_batch(
    tools: Tools, control_plane: ControlPlane, namespace: str
) -> None:
    out = tools.ok(
        "helm",
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        namespace,
        "--dry-run=client",
        # The session's CRDs were not installed by helm: an install would refuse to adopt them.
        "--set",
        "crds.install=false",
        kubeconfig=control_plane.kubeconfig,
    )
    notes = out.split("NOTES:", 1)[1]
    for text in (
        "kubectl apply -n",
        "kind: Batch",
        "recall submit",
        "recall watch",
        "kubectl get batches",
        f"kubectl exec -n {namespace} deploy/{RELEASE}-recall-operator -- recall transcript",
    ):
        assert text in notes, f"NOTES lack {text!r}:\n{notes}"
    assert f"namespace {namespace}" in notes


def install_chart_rbac(
    tools: Tools, control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> dict[str, str]:
    """Apply the chart's CRDs, ServiceAccounts and RBAC into `namespace`.

    Returns the ServiceAccount name of each component ("operator", "worker").
    """
    docs = tools.render(tmp_path, namespace=namespace)
    selected = [d for d in docs if d["kind"] in INSTALL_KINDS]
    tools.ok(
        "kubectl",
        "apply",
        "-f",
        "-",
        kubeconfig=control_plane.kubeconfig,
        stdin=yaml.safe_dump_all(selected),
    )
    return {
        "operator": find(docs, "ServiceAccount", "-operator")["metadata"]["name"],
        "worker": find(docs, "ServiceAccount", "-worker")["metadata"]["name"],
    }


def crd_state(api: client.ApiClient) -> dict[str, tuple[int, Any]]:
    ext = client.ApiextensionsV1Api(api)
    out = {}
    for name in repo_crds():
        crd = ext.read_custom_resource_definition(name)
        out[name] = (crd.metadata.generation, api.sanitize_for_serialization(crd.spec))
    return out


@pytest.fixture
def chart_accounts(
    tools: Tools, control_plane: ControlPlane, api: client.ApiClient, namespace: str, tmp_path: Path
) -> dict[str, str]:
    """The chart's RBAC applied into the test namespace; the CRDs re-applied unchanged."""
    before = crd_state(api)
    accounts = install_chart_rbac(tools, control_plane, namespace, tmp_path)
    assert crd_state(api) == before, "re-applying the chart's CRDs changed the cluster's"
    return accounts


@pytest.mark.slow
def test_chart_service_accounts__operator_and_two_workers_complete_a_batch(
    chart_accounts: dict[str, str],
    api: client.ApiClient,
    kube: Kube,
    control_plane: ControlPlane,
    namespace: str,
    procs: Procs,
    results: Bucket,
    tmp_path: Path,
) -> None:
    kubeconfigs = {}
    for component, account in chart_accounts.items():
        token = service_account_token(api, namespace, account)
        kubeconfigs[component] = token_kubeconfig(
            control_plane,
            token,
            tmp_path / f"{component}.kubeconfig",
            namespace,
            f"system:serviceaccount:{namespace}:{account}",
        )
    procs.recall(
        "operator",
        "operator",
        "--namespace",
        namespace,
        env={"KUBECONFIG": str(kubeconfigs["operator"])},
    )
    workers = ("worker-1", "worker-2")
    for name in workers:
        procs.worker(
            name,
            "--engine",
            "simulated",
            "--namespace",
            namespace,
            env={"KUBECONFIG": str(kubeconfigs["worker"])},
        )

    # The simulated example, faster: 4 items of 3 chunks.
    batch = yaml.safe_load((ROOT / "examples" / "batch-simulated.yaml").read_text())
    batch["spec"]["defaults"]["engine"]["simulate"] = {"chunks": 3, "chunkDelaySeconds": 0.1}
    batch["spec"]["defaults"]["leaseDurationSeconds"] = 5
    name = batch["metadata"]["name"]
    items = len(batch["spec"]["items"])
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, BATCH_PLURAL, batch)

    def complete() -> bool:
        status: BatchStatus = get_batch(kube, namespace, name).status
        return status.complete

    wait_for(complete, timeout=60, interval=0.2, message=procs.dump)
    status = get_batch(kube, namespace, name).status
    assert status.counts is not None
    assert (status.counts.total, status.counts.completed, status.counts.failed) == (items, items, 0)
    jobs = list_jobs(kube, namespace)
    assert len(jobs) == items
    for job in jobs:
        assert job.status.phase == Phase.SUCCEEDED
        assert job.status.result is not None and job.status.result.worker in workers
        assert results.get(job.status.result.transcript) is not None
    for proc in procs.started:
        assert proc.alive(), f"{proc.name} exited:\n{procs.dump()}"
        refused = [
            line
            for line in proc.log.read_text(errors="replace").splitlines()
            if "forbidden" in line.lower()
        ]
        assert not refused, f"{proc.name} was refused:\n" + "\n".join(refused[:5])


@dataclass(frozen=True)
class Check:
    """One `kubectl auth can-i` question: resource as kubectl names it, "x/status" a subresource."""

    verb: str
    resource: str
    expected: bool
    all_namespaces: bool = False


WORKER_MATRIX = [
    Check("get", "transcriptionjobs.recall.dev", True),
    Check("list", "transcriptionjobs.recall.dev", True),
    Check("watch", "transcriptionjobs.recall.dev", True),
    Check("patch", "transcriptionjobs.recall.dev/status", True),
    Check("get", "configmaps", False),
    Check("create", "configmaps", False),
    Check("patch", "configmaps", False),
    Check("delete", "configmaps", False),
    Check("patch", "transcriptionjobs.recall.dev", False),
    Check("update", "transcriptionjobs.recall.dev", False),
    Check("update", "transcriptionjobs.recall.dev/status", True),  # a claim is an update
    Check("create", "transcriptionjobs.recall.dev", False),
    Check("delete", "transcriptionjobs.recall.dev", False),
    Check("get", "batches.recall.dev", False),
    Check("list", "batches.recall.dev", False),
    Check("create", "batches.recall.dev", False),
    Check("patch", "batches.recall.dev", False),
    Check("patch", "batches.recall.dev/status", False),
    Check("get", "batches.recall.dev/status", False),
    Check("list", "configmaps", False),
    Check("get", "secrets", False),
    Check("list", "secrets", False),
    Check("create", "events", False),
    Check("create", "events.events.k8s.io", False),
    Check("list", "pods", False),
    Check("create", "leases.coordination.k8s.io", True),
    Check("update", "leases.coordination.k8s.io", True),
    Check("delete", "leases.coordination.k8s.io", True),
    Check("list", "leases.coordination.k8s.io", False),
]
OPERATOR_MATRIX = [
    Check("watch", "batches.recall.dev", True),
    Check("patch", "batches.recall.dev", True),
    Check("patch", "batches.recall.dev/status", True),
    Check("create", "transcriptionjobs.recall.dev", True),
    Check("delete", "transcriptionjobs.recall.dev", True),
    Check("patch", "transcriptionjobs.recall.dev/status", True),
    Check("create", "events", True),
    Check("create", "events.events.k8s.io", True),
    Check("deletecollection", "transcriptionjobs.recall.dev", True),
    Check("watch", "leases.coordination.k8s.io", True),
    Check("update", "leases.coordination.k8s.io", True),
    Check("get", "configmaps", True),
    Check("list", "configmaps", False),
    Check("delete", "configmaps", False),
    Check("get", "secrets", False),  # only the sinks' Secrets, by name
    Check("list", "secrets", False),
    Check("watch", "secrets", False),
    Check("create", "batches.recall.dev", False),
    Check("delete", "batches.recall.dev", False),
    Check("get", "secrets", False),
    Check("list", "secrets", False),
    # The usage record (recall-usage): RBAC cannot bound a create by name; patch it by name only.
    Check("create", "configmaps", True),
    Check("patch", "configmaps", False),
    Check("list", "pods", False),
    Check("list", "transcriptionjobs.recall.dev", False, all_namespaces=True),
]


def can_i(
    tools: Tools, control_plane: ControlPlane, namespace: str, account: str, check: Check
) -> bool:
    base, _, sub = check.resource.partition("/")
    user = f"system:serviceaccount:{namespace}:{account}"
    args = ["auth", "can-i", check.verb, base, f"--as={user}"]
    args += ["--subresource", sub] if sub else []
    args += ["--all-namespaces"] if check.all_namespaces else ["-n", namespace]
    out = tools.run("kubectl", *args, kubeconfig=control_plane.kubeconfig)
    answer = out.stdout.strip()
    assert answer in ("yes", "no"), f"kubectl {' '.join(args)}: {out.stdout}{out.stderr}"
    assert out.returncode == (0 if answer == "yes" else 1)
    return answer == "yes"


def test_can_i_matrix__each_service_account_has_what_it_needs_and_nothing_more(
    tools: Tools, chart_accounts: dict[str, str], control_plane: ControlPlane, namespace: str
) -> None:
    questions = [("worker", c) for c in WORKER_MATRIX] + [("operator", c) for c in OPERATOR_MATRIX]

    def ask(question: tuple[str, Check]) -> bool:
        component, check = question
        return can_i(tools, control_plane, namespace, chart_accounts[component], check)

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(ask, questions))
    lines = [f"{'account':<10} {'verb':<7} {'resource':<38} {'scope':<15} can-i  expected"]
    wrong = []
    for (component, check), answer in zip(questions, answers, strict=True):
        scope = "all namespaces" if check.all_namespaces else "namespace"
        lines.append(
            f"{component:<10} {check.verb:<7} {check.resource:<38} {scope:<15} "
            f"{'yes' if answer else 'no':<6} {'yes' if check.expected else 'no'}"
        )
        if answer != check.expected:
            wrong.append(lines[-1])
    print("\n" + "\n".join(lines))
    assert not wrong, "unexpected answers:\n" + "\n".join(wrong)


# --- what the chart linters asked for (hack/chart-lint.sh) ------------------------------------


def test_chart_lint__helm_lint_and_kube_score_pass_with_the_listed_exceptions() -> None:
    done = subprocess.run(
        [str(ROOT / "hack" / "chart-lint.sh")], capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_template_worker__health_probes_threads_from_cpu_and_bounded_storage(
    tools: Tools, tmp_path: Path
) -> None:
    worker = find(tools.render(tmp_path), "Deployment", "-worker")
    wk = container(worker)
    env = env_of(wk)
    ports = {p["name"]: p["containerPort"] for p in wk["ports"]}
    assert str(ports["health"]) == env["RECALL_WORKER_HEALTH_PORT"]
    assert wk["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert wk["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    # Whisper's threads follow the CPU limit, never the node's core count.
    assert env["RECALL_WORKER_WHISPER_THREADS"] == {
        "resourceFieldRef": {"containerName": "worker", "resource": "limits.cpu", "divisor": "1"}
    }
    resources = wk["resources"]
    assert resources["requests"]["ephemeral-storage"] and resources["limits"]["ephemeral-storage"]
    spread = worker["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert spread[0]["whenUnsatisfiable"] == "ScheduleAnyway"

    no_limit = {"worker": {"resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": None}}}}
    env = env_of(container(find(tools.render(tmp_path, no_limit), "Deployment", "-worker")))
    assert env["RECALL_WORKER_WHISPER_THREADS"]["resourceFieldRef"]["resource"] == "requests.cpu"
    fixed = {"engine": {"whisper": {"threads": 3}}, "worker": {"health": {"port": 0}}}
    wk = container(find(tools.render(tmp_path, fixed), "Deployment", "-worker"))
    assert env_of(wk)["RECALL_WORKER_WHISPER_THREADS"] == "3"
    assert "livenessProbe" not in wk and "readinessProbe" not in wk


def test_template_opt_ins__pdbs_network_policies_and_image_digest(
    tools: Tools, tmp_path: Path
) -> None:
    defaults = tools.render(tmp_path)
    assert not [d for d in defaults if d["kind"] in ("PodDisruptionBudget", "NetworkPolicy")]
    digest = "sha256:" + "ab" * 32
    docs = tools.render(
        tmp_path,
        {
            "image": {"digest": digest},
            "operator": {"replicas": 2, "podDisruptionBudget": {"enabled": True}},
            "worker": {"podDisruptionBudget": {"enabled": True}},
            "networkPolicy": {"enabled": True, "apiServer": {"cidrs": ["10.0.0.1/32"]}},
        },
    )
    for suffix in ("-operator", "-worker"):
        image = container(find(docs, "Deployment", suffix))["image"]
        assert image == f"recall@{digest}"
        pdb = find(docs, "PodDisruptionBudget", suffix)
        deployment = find(docs, "Deployment", suffix)
        assert pdb["spec"]["selector"] == deployment["spec"]["selector"]
        assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
        policy = find(docs, "NetworkPolicy", suffix)
        assert policy["spec"]["podSelector"] == deployment["spec"]["selector"]
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
        api = policy["spec"]["egress"][0]
        assert api["to"] == [{"ipBlock": {"cidr": "10.0.0.1/32"}}]
    assert find(docs, "PodDisruptionBudget", "-operator")["spec"]["minAvailable"] == 1
    assert find(docs, "PodDisruptionBudget", "-worker")["spec"]["maxUnavailable"] == 1


def test_template_apf__lease_writes_have_a_level_of_their_own(tools: Tools, tmp_path: Path) -> None:
    """The writes that keep a lease (patch of transcriptionjobs/status, and Leases) go to a
    level that lends nothing; everything else of recall's to a second level; a workers-only
    release matches only its own workers; apf.enabled=false renders none."""
    docs = tools.render(tmp_path)
    levels = {
        d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "PriorityLevelConfiguration"
    }
    schemas = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "FlowSchema"}
    leases, work = f"recall-{RELEASE}-recall-leases", f"recall-{RELEASE}-recall-work"
    assert set(levels) == set(schemas) == {leases, work}
    assert levels[leases]["limited"]["lendablePercent"] == 0
    assert schemas[leases]["matchingPrecedence"] < schemas[work]["matchingPrecedence"] < 9000
    (rule,) = schemas[leases]["rules"]
    accounts = {s["serviceAccount"]["name"] for s in rule["subjects"]}
    assert accounts == {f"{RELEASE}-recall-operator", f"{RELEASE}-recall-worker"}
    status, read, coordination = rule["resourceRules"]
    assert (status["verbs"], status["resources"]) == (["patch"], ["transcriptionjobs/status"])
    assert (read["verbs"], read["resources"]) == (["get"], ["transcriptionjobs"])
    assert coordination["resources"] == ["leases"] and "create" not in coordination["verbs"]
    assert schemas[work]["rules"][0]["resourceRules"][0]["verbs"] == ["*"]

    store = {"url": "s3://results/", "bundled": {"enabled": False}, "workerSecret": "w"}
    workers_only = tools.render(
        tmp_path, {"operator": {"enabled": False}, "crds": {"install": False}, "store": store}
    )
    for d in workers_only:
        if d["kind"] == "FlowSchema":
            names = {s["serviceAccount"]["name"] for s in d["spec"]["rules"][0]["subjects"]}
            assert names == {f"{RELEASE}-recall-worker"}
    off = tools.render(tmp_path, {"apf": {"enabled": False}})
    assert not [d for d in off if d["kind"] in ("FlowSchema", "PriorityLevelConfiguration")]
