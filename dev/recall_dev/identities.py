"""Who a component is to the API server, as a cluster makes it: ServiceAccounts with
TokenRequest tokens (clients and kubeconfigs), ClusterRole bindings, and the chart's API Priority
and Fairness objects, which match recall's requests by those ServiceAccounts.

An admin certificate (group system:masters) is exempt from API Priority and Fairness: what is
measured or tested about fairness runs as ServiceAccounts, as the chart's pods do.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from recall_dev.cluster import ControlPlane, tools_bin_dir
from recall_dev.pki import kubeconfig_dict

CHART = Path(__file__).resolve().parents[2] / "charts" / "recall"


def service_account_token(
    api: client.ApiClient, namespace: str, name: str, seconds: int = 3600
) -> str:
    """Create the ServiceAccount if needed and mint a token for it with the TokenRequest API."""
    core = client.CoreV1Api(api)
    try:
        core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    except ApiException as e:
        if e.status != 409:
            raise
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=seconds)
    )
    out = core.create_namespaced_service_account_token(name, namespace, request)
    token: str = out.status.token
    return token


def token_kubeconfig(cp: ControlPlane, token: str, path: Path, namespace: str, user: str) -> Path:
    config = kubeconfig_dict(cp.server, cp.pki.ca_cert, token=token, user=user, namespace=namespace)
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def service_account_kubeconfig(
    api: client.ApiClient, cp: ControlPlane, namespace: str, name: str, path: Path
) -> Path:
    """A kubeconfig at `path` that acts as ServiceAccount `namespace/name` (made if missing)."""
    token = service_account_token(api, namespace, name, seconds=24 * 3600)
    user = f"system:serviceaccount:{namespace}:{name}"
    return token_kubeconfig(cp, token, path, namespace, user)


def token_client(cp: ControlPlane, token: str) -> client.ApiClient:
    """An API client of `cp` that presents the bearer `token`."""
    cfg = client.Configuration()
    cfg.host = cp.server
    cfg.ssl_ca_cert = str(cp.pki.ca_cert)
    cfg.api_key = {"authorization": token}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    return client.ApiClient(cfg)


def service_account_client(
    api: client.ApiClient, cp: ControlPlane, namespace: str, name: str
) -> client.ApiClient:
    return token_client(cp, service_account_token(api, namespace, name))


def bind_cluster_role(api: client.ApiClient, namespace: str, sa: str, role: str) -> None:
    """Bind ServiceAccount `namespace/sa` to ClusterRole `role` cluster-wide."""
    client.RbacAuthorizationV1Api(api).create_cluster_role_binding(
        {
            "metadata": {"name": f"{namespace}-{sa}-{role}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}],
        }
    )


def chart_apf(release: str, namespace: str) -> list[dict[str, Any]]:
    """The chart's FlowSchemas and PriorityLevelConfigurations of `release` in `namespace`
    (`helm template`), matching its operator's and workers' ServiceAccounts
    (`<release>-recall-operator`, `<release>-recall-worker`)."""
    out = subprocess.run(
        [
            str(tools_bin_dir(build=False) / "helm"),
            "template",
            release,
            str(CHART),
            "--namespace",
            namespace,
            "--show-only",
            "templates/apf.yaml",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def install_apf(api: client.ApiClient, docs: list[dict[str, Any]]) -> None:
    """Create the priority levels, then the FlowSchemas that name them."""
    flow = client.FlowcontrolApiserverV1Api(api)
    for doc in docs:
        if doc["kind"] == "PriorityLevelConfiguration":
            flow.create_priority_level_configuration(doc)
    for doc in docs:
        if doc["kind"] == "FlowSchema":
            flow.create_flow_schema(doc)


def delete_apf(api: client.ApiClient, docs: list[dict[str, Any]]) -> None:
    """Remove what `install_apf` made (missing objects are fine)."""
    flow = client.FlowcontrolApiserverV1Api(api)
    for doc in docs:
        name = doc["metadata"]["name"]
        try:
            if doc["kind"] == "FlowSchema":
                flow.delete_flow_schema(name)
            elif doc["kind"] == "PriorityLevelConfiguration":
                flow.delete_priority_level_configuration(name)
        except ApiException as e:
            if e.status != 404:
                raise
