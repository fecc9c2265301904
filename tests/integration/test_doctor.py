"""`recall doctor` on the real API server and the real results store: a healthy install passes
every check; then one thing at a time is broken, and exactly the check that should fail does,
with its fix, while every other line stays ok.

The install is the chart's as far as the doctor reads it: the operator and worker Deployments
(objects: nothing here runs pods, so their pods are Pod objects whose Ready condition the test
sets as a kubelet would), a real `recall operator` with leader election that names one of those
pods, a real simulated `recall worker`, the API fairness objects, and the chart's own `helm
test` RBAC and user roles, rendered by Helm: the doctor runs as the test's ServiceAccount.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

import recall
from recall.bucket import Bucket
from recall.kube.client import KubeClient as Kube
from recall.protocol.workers import lease_name
from recall.resources import GROUP, JOB_PLURAL, VERSION
from recall_dev.cluster import ControlPlane, tools_bin_dir
from recall_dev.crds import install_crds, load_crds
from recall_dev.objstore import ObjectStore
from tests.helpers import Proc, Procs, create_job, wait_for
from tests.rbac import service_account_token, token_kubeconfig

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CHECKS = ["crds", "operator", "store", "workers", "engines", "apf", "access"]


def helm(*args: str, kubeconfig: Path | None = None, timeout: float = 60) -> str:
    """Run helm (from hack/k8s-tools) with caches of its own; its output."""
    with tempfile.TemporaryDirectory() as home:  # helm's own caches, not the user's
        env = {
            **{k: v for k, v in os.environ.items() if k != "KUBECONFIG"},
            "HELM_CACHE_HOME": home,
            "HELM_CONFIG_HOME": home,
            "HELM_DATA_HOME": home,
        }
        if kubeconfig is not None:
            env["KUBECONFIG"] = str(kubeconfig)
        out = subprocess.run(
            [str(tools_bin_dir(build=False) / "helm"), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=env,
        )
    assert out.returncode == 0, f"helm {' '.join(args)}:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def helm_template(namespace: str, fullname: str, *templates: str) -> list[dict[str, Any]]:
    args = ["template", "rc", str(ROOT / "charts/recall")]
    args += ["--namespace", namespace, "--set", f"fullnameOverride={fullname}"]
    for template in templates:
        args += ["--show-only", template]
    return [d for d in yaml.safe_load_all(helm(*args)) if d]


def credentials_dir(path: Path, env: dict[str, str]) -> Path:
    path.mkdir(parents=True)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        (path / name).write_text(env[name])
    return path


@dataclass
class Install:
    namespace: str
    fullname: str
    api: client.ApiClient
    kubeconfig: Path  # the doctor's: the chart's test ServiceAccount
    store: str
    operator_dir: Path
    worker_dir: Path
    operator: Proc
    worker: Proc
    operator_pod: str
    procs: Procs

    @property
    def apf(self) -> str:
        """The prefix the chart gives its (cluster-scoped) API Priority and Fairness objects."""
        return f"{self.namespace}-{self.fullname}"

    def doctor(
        self,
        *extra: str,
        options: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> dict[str, str]:
        """Run `recall doctor` (with `env` over this process's environment); its lines by check
        name (asserting one line per check)."""
        given = {
            "--store": self.store,
            "--operator-credentials": str(self.operator_dir),
            "--worker-credentials": str(self.worker_dir),
            **(options or {}),
        }
        args = [sys.executable, "-m", "recall", "doctor", "-n", self.namespace]
        args += ["--fullname", self.fullname, "--wait", "10", "--kubeconfig", str(self.kubeconfig)]
        args += [f"{k}={v}" for k, v in given.items()] + list(extra)
        out = subprocess.run(
            args,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={**os.environ, **(env or {})},
        )
        lines = out.stdout.splitlines()
        by_name = {line.split()[1]: line for line in lines if len(line.split()) > 1}
        assert list(by_name) == CHECKS, out.stdout + out.stderr
        failed = [n for n, line in by_name.items() if line.startswith("FAIL")]
        assert out.returncode == (1 if failed else 0), out.stdout + out.stderr
        return by_name

    def expect(
        self,
        failing: str,
        *words: str,
        options: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> str:
        """Run the doctor; only `failing` fails (or none), its line holds `words`."""
        lines = self.doctor(options=options, env=env)
        statuses = {name: line.split()[0] for name, line in lines.items()}
        wanted = {name: ("FAIL" if name == failing else "ok") for name in CHECKS}
        assert statuses == wanted, "\n".join(lines.values())
        line = lines[failing] if failing else ""
        for word in words:
            assert word in line, line
        if failing:
            assert " — fix: " in line, line
        return line


def ready_pod(core: client.CoreV1Api, namespace: str, name: str, labels: dict[str, str]) -> None:
    """A pod object of a Deployment, Ready as a kubelet would report it."""
    pod = {
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "recall"}]},
    }
    core.create_namespaced_pod(namespace, pod)
    set_ready(core, namespace, name, True)


def set_ready(core: client.CoreV1Api, namespace: str, name: str, ready: bool) -> None:
    condition = {"type": "Ready", "status": "True" if ready else "False"}
    core.patch_namespaced_pod_status(name, namespace, {"status": {"conditions": [condition]}})


def deployment(name: str, labels: dict[str, str], env: dict[str, str]) -> dict[str, Any]:
    container = {
        "name": "c",
        "image": "recall",
        "env": [{"name": k, "value": v} for k, v in env.items()],
    }
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }


def fairness(fullname: str) -> list[tuple[str, dict[str, Any]]]:
    """A PriorityLevelConfiguration and a FlowSchema per level, as the chart names them."""
    objects: list[tuple[str, dict[str, Any]]] = []
    for level in ("leases", "work"):
        name = f"{fullname}-{level}"
        objects.append(
            (
                "prioritylevelconfigurations",
                {
                    "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
                    "kind": "PriorityLevelConfiguration",
                    "metadata": {"name": name},
                    "spec": {
                        "type": "Limited",
                        "limited": {
                            "nominalConcurrencyShares": 5,
                            "limitResponse": {"type": "Reject"},
                        },
                    },
                },
            )
        )
        objects.append(
            (
                "flowschemas",
                {
                    "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
                    "kind": "FlowSchema",
                    "metadata": {"name": name},
                    "spec": {
                        "priorityLevelConfiguration": {"name": name},
                        "matchingPrecedence": 1000,
                        "rules": [
                            {
                                "subjects": [
                                    {"kind": "User", "user": {"name": f"{fullname}-nobody"}}
                                ],
                                "resourceRules": [
                                    {
                                        "verbs": ["get"],
                                        "apiGroups": [""],
                                        "resources": ["pods"],
                                        "namespaces": ["*"],
                                    }
                                ],
                            }
                        ],
                    },
                },
            )
        )
    return objects


FLOWCONTROL = ("flowcontrol.apiserver.k8s.io", "v1")


@pytest.fixture
def install(
    api: client.ApiClient,
    namespace: str,
    control_plane: ControlPlane,
    object_store: ObjectStore,
    procs: Procs,
    results: Bucket,
    tmp_path: Path,
) -> Iterator[Install]:
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    custom, rbac = client.CustomObjectsApi(api), client.RbacAuthorizationV1Api(api)
    fullname = f"{namespace}-recall"
    made: list[tuple[str, str]] = []  # cluster-scoped objects to delete afterwards
    # The doctor's ServiceAccount and RBAC and the user roles, as Helm renders them.
    for doc in helm_template(
        namespace, fullname, "templates/doctor-access.yaml", "templates/user-roles.yaml"
    ):
        kind, name = doc["kind"], doc["metadata"]["name"]
        if kind == "ClusterRole":
            rbac.create_cluster_role(doc)
            made.append(("clusterroles", name))
        elif kind == "ClusterRoleBinding":
            rbac.create_cluster_role_binding(doc)
            made.append(("clusterrolebindings", name))
        elif kind == "Role":
            rbac.create_namespaced_role(namespace, doc)
        elif kind == "RoleBinding":
            rbac.create_namespaced_role_binding(namespace, doc)
        elif kind == "ServiceAccount":
            core.create_namespaced_service_account(namespace, doc)
    for plural, obj in fairness(f"{namespace}-{fullname}"):
        custom.create_cluster_custom_object(*FLOWCONTROL, plural, obj)
        made.append((plural, obj["metadata"]["name"]))
    token = service_account_token(api, namespace, f"{fullname}-doctor")
    kubeconfig = token_kubeconfig(
        control_plane, token, tmp_path / "doctor.kubeconfig", namespace, "doctor"
    )
    try:
        labels = {"app.kubernetes.io/instance": "rc", "app.kubernetes.io/component": "operator"}
        pod = f"{fullname}-operator-7d9f-x2k4q"
        lease = f"{fullname}-operator"
        election = {
            "RECALL_OPERATOR_LEADER_ELECTION": "true",
            "RECALL_OPERATOR_LEADER_ELECTION_NAME": lease,
            "RECALL_OPERATOR_LEADER_ELECTION_NAMESPACE": namespace,
            "RECALL_STORE_URL": results.url,
        }
        apps.create_namespaced_deployment(
            namespace, deployment(f"{fullname}-operator", labels, election)
        )
        ready_pod(core, namespace, pod, labels)
        worker_labels = {
            "app.kubernetes.io/instance": "rc",
            "app.kubernetes.io/component": "worker",
        }
        engine = {"RECALL_WORKER_ENGINE": "simulated"}
        apps.create_namespaced_deployment(
            namespace, deployment(f"{fullname}-worker", worker_labels, engine)
        )
        operator = procs.recall(
            "operator", "operator", "--namespace", namespace, env={**election, "POD_NAME": pod}
        )
        worker = procs.worker(
            "w1",
            "--engine",
            "simulated",
            "--namespace",
            namespace,
            env={"RECALL_WORKER_REGISTRATION_SECONDS": "3"},
        )
        wait_for(
            lambda: _holder(api, namespace, lease).startswith(pod),
            timeout=60,
            message=lambda: f"the operator leading\n{procs.dump()}",
        )
        wait_for(
            lambda: _lease_exists(api, namespace, lease_name("w1")),
            timeout=60,
            message=lambda: f"the worker registered\n{procs.dump()}",
        )
        yield Install(
            namespace,
            fullname,
            api,
            kubeconfig,
            results.url,
            credentials_dir(tmp_path / "operator-store", object_store.env()),
            credentials_dir(tmp_path / "worker-store", object_store.env(object_store.worker)),
            operator,
            worker,
            pod,
            procs,
        )
    finally:
        procs.kill_all()
        for plural, name in made:
            if plural in ("clusterroles", "clusterrolebindings"):
                getattr(rbac, f"delete_cluster_role{'_binding' if 'binding' in plural else ''}")(
                    name
                )
            else:
                custom.delete_cluster_custom_object(*FLOWCONTROL, plural, name)


def _holder(api: client.ApiClient, namespace: str, name: str) -> str:
    try:
        lease = client.CoordinationV1Api(api).read_namespaced_lease(name, namespace)
    except client.exceptions.ApiException:
        return ""
    return str(lease.spec.holder_identity or "")


def _lease_exists(api: client.ApiClient, namespace: str, name: str) -> bool:
    return bool(_holder(api, namespace, name))


def _engine_state(api: client.ApiClient, namespace: str, name: str) -> str:
    try:
        lease = client.CoordinationV1Api(api).read_namespaced_lease(name, namespace)
    except client.exceptions.ApiException:
        return ""
    return str((lease.metadata.annotations or {}).get("recall.dev/engine-state") or "")


def test_doctor__healthy_install_passes_then_each_broken_part_fails_its_own_check(
    install: Install, kube: Kube, object_store: ObjectStore, tmp_path: Path
) -> None:
    ns, api = install.namespace, install.api
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    rbac = client.RbacAuthorizationV1Api(api)

    lines = install.doctor()
    assert all(line.startswith("ok") for line in lines.values()), "\n".join(lines.values())
    assert "leads" in lines["operator"] and install.operator_pod in lines["operator"]
    assert "scratch/ and nothing more" in lines["store"]
    assert "(1 simulated), loaded simulated" in lines["workers"]  # its engine loads nothing

    # The results store: the operator's identity refused, the workers' reaching too far, no bucket.
    install.expect(
        "store",
        "refuses the operator's identity",
        "StorageAccessDenied",
        options={"--operator-credentials": str(install.worker_dir)},
    )
    install.expect(
        "store",
        "reaches index/ and the prefix's top level",
        options={"--worker-credentials": str(install.operator_dir)},
    )
    install.expect(
        "store",
        "StorageBucketMissing",
        "create the bucket",
        options={"--store": "s3://no-such-bucket-here/"},
    )
    with socket.socket() as closed:  # a port nothing listens on: the store does not answer
        closed.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"
    install.expect(
        "store", "StorageUnavailable", "check the endpoint", env={"AWS_ENDPOINT_URL": endpoint}
    )

    # A job failed on its model within the hour.
    create_job(kube, ns, "talk", engine="whisper")  # no worker here takes it
    error = {
        "reason": "ModelNotFound",
        "message": "no model large-v9",
        "time": dt.datetime.now(dt.UTC).isoformat(),
    }
    custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, ns, JOB_PLURAL, "talk", {"status": {"lastError": error}}
    )
    install.expect("engines", "talk: ModelNotFound: no model large-v9", "engine.whisper.model")
    custom.delete_namespaced_custom_object(GROUP, VERSION, ns, JOB_PLURAL, "talk")

    # A FlowSchema missing, then pointing elsewhere.
    work = f"{install.apf}-work"
    schema = custom.get_cluster_custom_object(*FLOWCONTROL, "flowschemas", work)
    custom.delete_cluster_custom_object(*FLOWCONTROL, "flowschemas", work)
    install.expect("apf", f"no FlowSchema {work}", "apf.enabled=true")
    schema = {"apiVersion": schema["apiVersion"], "kind": schema["kind"], "spec": schema["spec"]}
    schema["metadata"] = {"name": work}
    schema["spec"]["priorityLevelConfiguration"] = {"name": f"{install.apf}-leases"}
    custom.create_cluster_custom_object(*FLOWCONTROL, "flowschemas", schema)
    install.expect("apf", f"points at '{install.apf}-leases'")
    custom.delete_cluster_custom_object(*FLOWCONTROL, "flowschemas", work)
    schema["spec"]["priorityLevelConfiguration"] = {"name": work}
    custom.create_cluster_custom_object(*FLOWCONTROL, "flowschemas", schema)
    # A PriorityLevelConfiguration missing.
    leases = f"{install.apf}-leases"
    level = custom.get_cluster_custom_object(*FLOWCONTROL, "prioritylevelconfigurations", leases)
    custom.delete_cluster_custom_object(*FLOWCONTROL, "prioritylevelconfigurations", leases)
    install.expect("apf", f"no PriorityLevelConfiguration {leases}", "apf.enabled=true")
    level = {k: level[k] for k in ("apiVersion", "kind", "spec")} | {"metadata": {"name": leases}}
    custom.create_cluster_custom_object(*FLOWCONTROL, "prioritylevelconfigurations", level)
    install.expect("")

    # The user the doctor runs as, without the edit role.
    binding = rbac.read_namespaced_role_binding(f"{install.fullname}-doctor-user", ns)
    rbac.delete_namespaced_role_binding(binding.metadata.name, ns)
    install.expect("access", "may not create batches", "--clusterrole=edit")
    again = api.sanitize_for_serialization(binding)
    again["metadata"] = {"name": binding.metadata.name}
    rbac.create_namespaced_role_binding(ns, again)

    # A worker whose own model does not load: its registration says why.
    bad = install.procs.worker(
        "w2",
        "--engine",
        "whisper",
        "--namespace",
        ns,
        env={
            "RECALL_WORKER_REGISTRATION_SECONDS": "3",
            "RECALL_WORKER_WHISPER_MODEL": str(tmp_path / "no-such-model"),
        },
    )
    wait_for(
        lambda: _engine_state(api, ns, lease_name("w2")) == "failed",
        timeout=60,
        message=lambda: f"w2's registration saying its model failed\n{install.procs.dump()}",
    )
    install.expect(
        "workers",
        "1 of 2 live workers could not load their engine and model; w2 (whisper): ModelNotFound",
        "no-such-model",
        "engine.whisper.model names a model the workers cannot find",
    )
    bad.signal(signal.SIGTERM)  # a clean stop deletes its registration
    bad.wait(30)
    wait_for(lambda: not _lease_exists(api, ns, lease_name("w2")), timeout=30)

    # The worker frozen: its registration stops moving.
    install.worker.signal(signal.SIGSTOP)
    install.expect("workers", "none of the 1 worker registrations", "is being renewed")
    install.worker.signal(signal.SIGCONT)

    # The operator's pod unready; then the leader's pod unready while another is ready.
    pod = install.operator_pod
    set_ready(core, ns, pod, False)
    install.expect("operator", "none of the 1 pods", "describe pods")
    labels = {"app.kubernetes.io/instance": "rc", "app.kubernetes.io/component": "operator"}
    ready_pod(core, ns, f"{install.fullname}-operator-7d9f-standby", labels)
    install.expect("operator", f"the leader {pod}", "is not a ready pod", "get pods")
    set_ready(core, ns, pod, True)

    # The operator frozen: nobody renews the leader Lease; then no Lease at all.
    install.operator.signal(signal.SIGSTOP)
    install.expect("operator", "was not renewed", "no operator leads")
    election = f"{install.fullname}-operator"
    client.CoordinationV1Api(api).delete_namespaced_lease(election, ns)
    install.expect("operator", f"no leader Lease {ns}/{election}: no replica has led", "logs")
    install.operator.signal(signal.SIGCONT)
    wait_for(lambda: _holder(api, ns, election).startswith(pod), timeout=60)  # it leads again

    # No worker at all: the last one stopped cleanly and deleted its registration.
    install.worker.signal(signal.SIGTERM)
    install.worker.wait(30)
    install.expect("workers", f"no worker has registered in {ns}", "kubectl -n")


def test_doctor__missing_unestablished_newer_and_older_crds_fail_the_crds_check() -> None:
    """On a control plane of its own, where the CRDs can be removed and changed."""
    cp = ControlPlane()
    cp.start(timeout=180)
    env = {**cp.env(), "RECALL_STORE_URL": ""}
    command = [sys.executable, "-m", "recall", "doctor", "-n", "default", "--wait", "1"]

    def crds_line() -> str:
        out = subprocess.run(
            [*command, "--no-apf"], capture_output=True, text=True, env=env, timeout=120
        )
        assert out.returncode == 1, out.stdout + out.stderr  # no operator here: it fails too
        return out.stdout.splitlines()[0]

    try:
        line = crds_line()
        assert line.startswith("FAIL  crds      CRD transcriptionjobs.recall.dev is not installed")
        assert "— fix: helm upgrade --install with crds.install=true" in line
        # Not Established: another CRD of the group took its short name first.
        ext = client.ApiextensionsV1Api(client.ApiClient(_config(cp)))
        ext.create_custom_resource_definition(_decoy_crd())
        for crd in load_crds():
            ext.create_custom_resource_definition(crd)
        line = crds_line()
        assert line.startswith("FAIL  crds      CRD transcriptionjobs.recall.dev is not Establish")
        assert "— fix: kubectl describe crd transcriptionjobs.recall.dev" in line
        ext.delete_custom_resource_definition("decoys.recall.dev")
        install_crds(str(cp.kubeconfig))  # waits until the names are accepted again
        line = crds_line()
        assert line.startswith("ok    crds") and f"of release {recall.__version__}" in line
        # A newer release's CRD (its version label), even with the fields this CLI knows.
        ext.patch_custom_resource_definition(
            "transcriptionjobs.recall.dev",
            {"metadata": {"labels": {"app.kubernetes.io/version": "99.0.0"}}},
        )
        line = crds_line()
        assert line.startswith(
            "FAIL  crds      CRD transcriptionjobs.recall.dev is of release 99.0.0, this CLI of "
            f"{recall.__version__}: the CLI is older — fix: upgrade the recall CLI to 99.0.0"
        ), line
        install_crds(str(cp.kubeconfig))  # back to this release's label
        assert crds_line().startswith("ok    crds")
        # An older CRD: a field this CLI writes is missing from its schema.
        crd = ext.read_custom_resource_definition("transcriptionjobs.recall.dev")
        spec = crd.spec.versions[0].schema.open_apiv3_schema.properties["spec"]
        del spec.properties["priority"]  # a field no CEL rule reads
        ext.replace_custom_resource_definition(crd.metadata.name, crd)
        line = crds_line()
        assert line.startswith("FAIL  crds      CRD transcriptionjobs.recall.dev lacks ")
        assert ".spec.priority" in line and "older than this CLI" in line
        assert "— fix: upgrade the CRDs to this release" in line
    finally:
        cp.stop()


def _decoy_crd() -> dict[str, Any]:
    """A CRD of the recall.dev group whose short name is the TranscriptionJob CRD's (`tj`)."""
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "decoys.recall.dev"},
        "spec": {
            "group": "recall.dev",
            "scope": "Namespaced",
            "names": {
                "kind": "Decoy",
                "plural": "decoys",
                "singular": "decoy",
                "shortNames": ["tj"],
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def _config(cp: ControlPlane) -> client.Configuration:
    from recall.kube.client import load_api_client

    return load_api_client(cp.kubeconfig).configuration


def test_helm_test_pod__accepted_by_the_api_server_and_its_args_are_doctor_options(
    api: client.ApiClient, namespace: str
) -> None:
    import typer

    from recall.cli.main import app

    docs = helm_template(namespace, f"{namespace}-recall", "templates/tests/doctor.yaml")
    (pod,) = docs  # the test's only hook: its account and roles are the release's (uninstalled)
    assert pod["kind"] == "Pod" and pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    core = client.CoreV1Api(api)
    core.create_namespaced_service_account(
        namespace, {"metadata": {"name": f"{namespace}-recall-doctor"}}
    )
    core.create_namespaced_pod(namespace, pod, dry_run="All")  # admission and schema, for real
    (container,) = pod["spec"]["containers"]
    args = container["args"]
    assert args[0] == "doctor"
    doctor = typer.main.get_command(app).commands["doctor"]  # type: ignore[attr-defined]
    context = doctor.make_context("doctor", list(args[1:]))
    assert context.params["namespace"] == namespace
    assert context.params["worker_credentials"] == Path("/var/run/secrets/recall/store-worker")
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["RECALL_STORE_CREDENTIALS_DIR"] == "/var/run/secrets/recall/store"
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/var/run/secrets/recall/store", "/var/run/secrets/recall/store-worker"} <= mounts


def _cluster_scoped(api: client.ApiClient, release: str) -> set[tuple[str, str, str]]:
    """(kind, name, uid) of every cluster-scoped object a release of this name labels its own."""
    selector = f"app.kubernetes.io/instance={release}"
    rbac, custom = client.RbacAuthorizationV1Api(api), client.CustomObjectsApi(api)
    found = {
        ("ClusterRole", o.metadata.name, o.metadata.uid)
        for o in rbac.list_cluster_role(label_selector=selector).items
    }
    found |= {
        ("ClusterRoleBinding", o.metadata.name, o.metadata.uid)
        for o in rbac.list_cluster_role_binding(label_selector=selector).items
    }
    for plural in ("flowschemas", "prioritylevelconfigurations"):
        listed = custom.list_cluster_custom_object(*FLOWCONTROL, plural, label_selector=selector)
        found |= {(plural, o["metadata"]["name"], o["metadata"]["uid"]) for o in listed["items"]}
    return found


def test_helm_test__only_its_pod_is_a_hook_and_uninstall_leaves_nothing_cluster_scoped(
    api: client.ApiClient, control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """`helm install`, `helm test` (its pod reported Succeeded here, as a kubelet would) and
    `helm uninstall` on the real API server: the doctor's roles come and go with the release;
    only its pod, a namespaced hook kept for its logs, stays."""
    release, kubeconfig = "rc", control_plane.kubeconfig
    core = client.CoreV1Api(api)
    before = _cluster_scoped(api, release)  # other namespaces' releases of this name
    chart = ["--namespace", namespace, "--set", "crds.install=false"]  # the session's CRDs
    helm("install", release, str(ROOT / "charts/recall"), *chart, kubeconfig=kubeconfig)
    installed = {(kind, name) for kind, name, _ in _cluster_scoped(api, release) - before}
    doctor = f"{namespace}-{release}-recall-doctor"
    assert {("ClusterRole", doctor), ("ClusterRoleBinding", doctor)} <= installed

    with subprocess.Popen(
        [str(tools_bin_dir(build=False) / "helm"), "test", release, "-n", namespace],
        env={
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            **{f"HELM_{d}_HOME": str(tmp_path / "helm") for d in ("CACHE", "CONFIG", "DATA")},
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as test:
        pod = f"{release}-recall-doctor"
        wait_for(
            lambda: pod in {p.metadata.name for p in core.list_namespaced_pod(namespace).items},
            timeout=60,
            message="helm test's pod",
        )
        core.patch_namespaced_pod_status(pod, namespace, {"status": {"phase": "Succeeded"}})
        out, _ = test.communicate(timeout=120)
    assert test.returncode == 0, out
    assert f"TEST SUITE:     {pod}" in out and "Succeeded" in out, out

    helm("uninstall", release, "--namespace", namespace, "--wait", kubeconfig=kubeconfig)
    assert _cluster_scoped(api, release) == before
    left = {
        f"{kind} {o.metadata.name}"
        for kind, listed in (
            ("ServiceAccount", core.list_namespaced_service_account),
            ("Pod", core.list_namespaced_pod),
            ("Role", client.RbacAuthorizationV1Api(api).list_namespaced_role),
            ("RoleBinding", client.RbacAuthorizationV1Api(api).list_namespaced_role_binding),
        )
        for o in listed(namespace, label_selector="app.kubernetes.io/component=doctor").items
    }
    assert left == {f"Pod {pod}"}
