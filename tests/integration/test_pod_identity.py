"""Pod identity: the chart's opt-in ValidatingAdmissionPolicy, against the real API server.

The CRD's fence rules refuse a writer that does not present the current lease token; any
reader of the job can present it, though. The policy adds who is writing: the worker
ServiceAccount may write a job's status only while its own pod holds the lease (or to claim
the job for its own pod). The pod is the one the request's token is bound to — here Pod
objects (no node needed) and TokenRequest tokens bound to them, as the kubelet mounts them.

The policy and the ServiceAccounts/RBAC come from `helm template` of the chart with
`worker.podIdentityPolicy.enabled=true`, so what is tested is what the chart installs.
Writes are raw merge patches of `/status`, as in test_careless_clients.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from recall.kube import Forbidden
from recall.kube.http import translate
from recall_dev.cluster import ControlPlane
from recall_dev.identities import token_client
from tests.helpers import Kube, refused_with, run_captured, wait_for
from tests.integration.test_careless_clients import (
    GROUP,
    MERGE_PATCH,
    PLURAL,
    VERSION,
    Patch,
    Step,
    claim,
    complete,
    create,
    read,
    reclaim,
    renew,
    token,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "recall"
RELEASE = "rc"
WORKER_SA = f"{RELEASE}-recall-worker"
OPERATOR_SA = f"{RELEASE}-recall-operator"
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
# What the test installs from the rendered chart; the Deployments are left out.
INSTALL_KINDS = {
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}


# -- the chart -----------------------------------------------------------------------------


def helm(cp: ControlPlane, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert cp.bin_dir is not None
    home = tmp / "helm-home"
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env.update(
        HELM_CACHE_HOME=str(home / "cache"),
        HELM_CONFIG_HOME=str(home / "config"),
        HELM_DATA_HOME=str(home / "data"),
    )
    return run_captured([cp.bin_dir / "helm", *args], timeout=60, env=env)


def render(cp: ControlPlane, tmp: Path, namespace: str, *sets: str) -> list[dict[str, Any]]:
    args = ["template", RELEASE, str(CHART), "--namespace", namespace]
    for s in sets:
        args += ["--set", s]
    out = helm(cp, tmp, *args)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def kubectl(cp: ControlPlane, *args: str, stdin: str | None = None) -> str:
    assert cp.bin_dir is not None
    out = run_captured(
        [cp.bin_dir / "kubectl", "--kubeconfig", cp.kubeconfig, *args], timeout=60, input=stdin
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


# -- identities ----------------------------------------------------------------------------


def create_pod(api: client.ApiClient, namespace: str, name: str, sa: str) -> str:
    """A Pod object that no node runs: enough to bind tokens to. Its uid."""
    pod = client.CoreV1Api(api).create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {
                "serviceAccountName": sa,
                "containers": [{"name": "worker", "image": "recall:test"}],
            },
        },
    )
    uid: str = pod.metadata.uid
    return uid


def mint(api: client.ApiClient, namespace: str, sa: str, pod: tuple[str, str] | None = None) -> str:
    """A TokenRequest token of `sa`, bound to the Pod (name, uid) when one is given."""
    bound = (
        client.V1BoundObjectReference(api_version="v1", kind="Pod", name=pod[0], uid=pod[1])
        if pod
        else None
    )
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(
            audiences=[], expiration_seconds=3600, bound_object_ref=bound
        )
    )
    out = client.CoreV1Api(api).create_namespaced_service_account_token(sa, namespace, request)
    t: str = out.status.token
    return t


@dataclass
class Writer:
    """One identity writing job status with raw merge patches (no resourceVersion)."""

    api: client.ApiClient
    namespace: str

    def write(self, name: str, status: Patch) -> dict[str, Any]:
        out: dict[str, Any] = client.CustomObjectsApi(
            self.api
        ).patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            self.namespace,
            PLURAL,
            name,
            {"status": status},
            _content_type=MERGE_PATCH,
        )
        return out

    def step(self, kube: Kube, name: str, action: Step) -> dict[str, Any]:
        """Build the action's patch from the job as the admin reads it, and write it."""
        return self.write(name, action(read(kube, self.namespace, name)["status"]))

    def refused(self, kube: Kube, name: str, status: Patch) -> str:
        """The write is denied by the policy (403) and the job is untouched; the message."""
        before = read(kube, self.namespace, name)
        with pytest.raises(ApiException) as e:
            self.write(name, status)
        assert e.value.status == 403, e.value.body
        assert read(kube, self.namespace, name) == before
        body = e.value.body
        text = body.decode() if isinstance(body, bytes) else str(body)
        assert "ValidatingAdmissionPolicy" in text, text
        return text


@dataclass
class Cluster:
    """The chart's policy for one namespace, two worker pods and their identities."""

    cp: ControlPlane
    api: client.ApiClient
    namespace: str
    policy: str
    worker_a: Writer  # token bound to Pod worker-a
    worker_b: Writer  # token bound to Pod worker-b
    unbound: Writer  # the worker ServiceAccount, token bound to no pod
    operator: Writer  # the operator ServiceAccount, token bound to no pod

    def writer_for_pod(self, pod: str, uid: str) -> Writer:
        bearer = mint(self.api, self.namespace, WORKER_SA, (pod, uid))
        return Writer(token_client(self.cp, bearer), self.namespace)


@pytest.fixture
def cluster(
    api: client.ApiClient,
    kube: Kube,
    control_plane: ControlPlane,
    namespace: str,
    tmp_path: Path,
) -> Iterator[Cluster]:
    docs = render(
        control_plane,
        tmp_path,
        namespace,
        "crds.install=false",
        "worker.podIdentityPolicy.enabled=true",
    )
    # Of the chart's admission policies, the pod-identity one alone (cluster-scoped, deleted below)
    policies = pod_identity(docs)
    wanted = [
        d
        for d in docs
        if d["kind"] in INSTALL_KINDS and (d in policies or "Policy" not in d["kind"])
    ]
    assert {d["kind"] for d in wanted} == INSTALL_KINDS
    manifest = yaml.safe_dump_all(wanted)
    policy = next(d["metadata"]["name"] for d in pod_identity(wanted))
    kubectl(control_plane, "apply", "-f", "-", stdin=manifest)
    try:
        pods = {p: create_pod(api, namespace, p, WORKER_SA) for p in ("worker-a", "worker-b")}

        def writer(sa: str, pod: str | None = None) -> Writer:
            bound = (pod, pods[pod]) if pod else None
            return Writer(token_client(control_plane, mint(api, namespace, sa, bound)), namespace)

        c = Cluster(
            control_plane,
            api,
            namespace,
            policy,
            worker_a=writer(WORKER_SA, "worker-a"),
            worker_b=writer(WORKER_SA, "worker-b"),
            unbound=writer(WORKER_SA),
            operator=writer(OPERATOR_SA),
        )
        wait_until_enforced(kube, c)
        yield c
    finally:
        kubectl(
            control_plane,
            "delete",
            "--ignore-not-found",
            "--wait=false",
            f"validatingadmissionpolicybinding/{policy}",
            f"validatingadmissionpolicy/{policy}",
        )


def pod_identity(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The worker pod-identity policy and its binding among the chart's objects (the chart
    has other admission policies: the event sinks')."""
    kinds = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
    return [
        d for d in docs if d["kind"] in kinds and d["metadata"]["name"].endswith("-pod-identity")
    ]


def wait_until_enforced(kube: Kube, c: Cluster) -> None:
    """RBAC and the policy reach the API server's caches within moments: wait for both."""
    create(kube, c.namespace, "probe")

    def probe(writer: Writer) -> str:
        try:
            writer.write("probe", {})
        except ApiException as e:
            return e.body.decode() if isinstance(e.body, bytes) else str(e.body)
        return "allowed"

    # An empty patch changes nothing, whether the policy lets it through or not.
    wait_for(
        lambda: c.policy in probe(c.unbound),
        timeout=30,
        message=lambda: f"the policy to refuse a token bound to no pod: {probe(c.unbound)}",
    )
    wait_for(lambda: probe(c.operator) == "allowed", timeout=30, message="the operator's RBAC")


def leased_by_a(kube: Kube, c: Cluster, name: str) -> None:
    create(kube, c.namespace, name)
    c.worker_a.step(kube, name, claim("worker-a"))


# -- the tests -----------------------------------------------------------------------------


def test_pod_bound_token__names_its_pod_to_the_api_server(
    api: client.ApiClient, namespace: str, control_plane: ControlPlane, cluster: Cluster
) -> None:
    """What the policy reads: the API server puts the pod name in the user's extra."""
    review = client.AuthenticationV1Api(cluster.worker_a.api).create_self_subject_review(
        client.V1SelfSubjectReview()
    )
    user = review.status.user_info
    assert user.username == f"system:serviceaccount:{namespace}:{WORKER_SA}"
    assert user.extra[POD_NAME_EXTRA] == ["worker-a"]
    unbound = client.AuthenticationV1Api(cluster.unbound.api).create_self_subject_review(
        client.V1SelfSubjectReview()
    )
    assert POD_NAME_EXTRA not in (unbound.status.user_info.extra or {})


def test_policy__type_checks_against_the_crd(api: client.ApiClient, cluster: Cluster) -> None:
    policy = client.AdmissionregistrationV1Api(api).read_validating_admission_policy(cluster.policy)
    checking = policy.status.type_checking if policy.status else None
    assert not (checking and checking.expression_warnings), checking


def test_worker_pod__claims_renews_and_completes_its_own_job(kube: Kube, cluster: Cluster) -> None:
    create(kube, cluster.namespace, "j")
    a = cluster.worker_a
    a.step(kube, "j", claim("worker-a"))
    a.step(kube, "j", renew)
    status = a.step(kube, "j", complete)["status"]
    assert status["phase"] == "Succeeded"
    assert status["result"]["token"] == token("worker-a", 1)


def test_worker_pod__cannot_write_a_job_another_pod_holds(kube: Kube, cluster: Cluster) -> None:
    leased_by_a(kube, cluster, "j")
    status = read(kube, cluster.namespace, "j")["status"]
    # B presents the right fence (anyone who reads the job can): only the policy stops it.
    for patch in (renew(status), complete(status)):
        message = cluster.worker_b.refused(kube, "j", patch)
        assert "the job is leased by worker-a, not by this pod (worker-b)" in message
    cluster.worker_a.step(kube, "j", renew)


def test_worker_pod__claims_only_for_itself(kube: Kube, cluster: Cluster) -> None:
    create(kube, cluster.namespace, "j")
    status = read(kube, cluster.namespace, "j")["status"]
    message = cluster.worker_b.refused(kube, "j", claim("worker-a")(status))
    assert "status.lease.holder must be worker-b" in message
    cluster.worker_b.step(kube, "j", claim("worker-b"))


def test_worker_pod__cannot_write_a_job_nobody_holds(kube: Kube, cluster: Cluster) -> None:
    create(kube, cluster.namespace, "j")
    message = cluster.worker_a.refused(kube, "j", {"offer": {"worker": "worker-a"}})
    assert "a worker writes only a job its own pod holds" in message


def test_worker_token_bound_to_no_pod__is_refused(kube: Kube, cluster: Cluster) -> None:
    create(kube, cluster.namespace, "j")
    status = read(kube, cluster.namespace, "j")["status"]
    message = cluster.unbound.refused(kube, "j", claim("worker-a")(status))
    assert "this token is bound to no pod" in message


def test_refusals__the_store_tells_rbac_from_the_policy(
    api: client.ApiClient, kube: Kube, cluster: Cluster
) -> None:
    """A lease holder retries an RBAC refusal until its renew deadline (a kube-apiserver that
    just started refuses so until its caches are filled) and takes an admission policy's as
    final: `Forbidden.by_authorizer` tells them apart by the API server's own messages."""
    create(kube, cluster.namespace, "j")
    status = read(kube, cluster.namespace, "j")["status"]
    client.CoreV1Api(api).create_namespaced_service_account(
        cluster.namespace, {"metadata": {"name": "nobody"}}
    )
    nobody = Writer(
        token_client(cluster.cp, mint(api, cluster.namespace, "nobody")), cluster.namespace
    )
    refusals = {}
    for who, writer in (("rbac", nobody), ("policy", cluster.unbound)):
        with pytest.raises(ApiException) as e:
            writer.write("j", claim("worker-a")(status))
        error = translate(e.value, "patch status of job j", write=True)
        assert isinstance(error, Forbidden), error
        refusals[who] = error
    assert refusals["rbac"].by_authorizer, refusals["rbac"].message
    assert not refusals["policy"].by_authorizer, refusals["policy"].message


def test_operator__is_not_affected(kube: Kube, cluster: Cluster) -> None:
    """The operator's ServiceAccount (here with a token bound to no pod) reclaims a job a
    worker pod holds: the policy does not match it; the CRD's fence rules still do."""
    leased_by_a(kube, cluster, "j")
    status = cluster.operator.step(kube, "j", reclaim)["status"]
    assert status["phase"] == "Queued"
    assert status["expiredLeases"] == 1
    # Worker A's renew after the reclaim is refused by the policy and by the CRD alike.
    with pytest.raises(ApiException) as e:
        cluster.worker_a.write("j", {"lease": {"renewTime": "2030-01-01T00:00:00Z"}})
    assert e.value.status in (403, 422)


def test_deleted_pod__its_token_no_longer_authenticates_but_a_namesake_is_the_holder(
    api: client.ApiClient, kube: Kube, cluster: Cluster
) -> None:
    """Limits, written down in the README: a deleted pod's token is refused only after the API
    server's token cache forgets it (seconds), and identity is the pod name, so a pod recreated
    with the same name (a StatefulSet's) writes what its namesake held."""
    core = client.CoreV1Api(api)
    pod = core.create_namespaced_pod(
        cluster.namespace,
        {
            "metadata": {"name": "worker-c"},
            "spec": {
                "serviceAccountName": WORKER_SA,
                "containers": [{"name": "worker", "image": "recall:test"}],
            },
        },
    )
    old = cluster.writer_for_pod("worker-c", pod.metadata.uid)
    create(kube, cluster.namespace, "j")
    old.step(kube, "j", claim("worker-c"))

    core.delete_namespaced_pod("worker-c", cluster.namespace, grace_period_seconds=0)
    wait_for(
        lambda: (
            not core.list_namespaced_pod(
                cluster.namespace, field_selector="metadata.name=worker-c"
            ).items
        ),
        timeout=30,
        message="the pod to be gone",
    )

    # The API server caches a successful token review for a few seconds. (The empty write
    # changes nothing either way.)
    wait_for(
        lambda: refused_with(401, lambda: old.write("j", {})),
        timeout=30,
        message="the deleted pod's token to be refused",
    )

    uid = create_pod(api, cluster.namespace, "worker-c", WORKER_SA)
    namesake = cluster.writer_for_pod("worker-c", uid)
    status = namesake.step(kube, "j", renew)["status"]
    assert status["lease"]["holder"] == "worker-c"


def test_chart__policy_is_off_by_default_and_refuses_contradicting_values(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    assert pod_identity(render(control_plane, tmp_path, "ns")) == []

    on = ["template", RELEASE, str(CHART), "--set", "worker.podIdentityPolicy.enabled=true"]
    shared = helm(
        control_plane,
        tmp_path,
        *on,
        "--set",
        "worker.serviceAccount.create=false",
        "--set",
        "operator.serviceAccount.create=false",
    )
    assert shared.returncode != 0
    assert "needs the workers to have their own ServiceAccount" in shared.stderr
    renamed = helm(
        control_plane,
        tmp_path,
        *on,
        "--set",
        "worker.extraEnv[0].name=RECALL_WORKER_ID",
        "--set",
        "worker.extraEnv[0].value=me",
    )
    assert renamed.returncode != 0
    assert "remove RECALL_WORKER_ID" in renamed.stderr
    warn_and_deny = helm(
        control_plane,
        tmp_path,
        *on,
        "--set",
        "worker.podIdentityPolicy.validationActions={Deny,Warn}",
    )
    assert warn_and_deny.returncode != 0
    assert "validationActions" in warn_and_deny.stderr
