"""ServiceAccount identities for RBAC tests: TokenRequest tokens, clients and kubeconfigs."""

from __future__ import annotations

from pathlib import Path

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from recall_dev.cluster import ControlPlane
from recall_dev.pki import kubeconfig_dict


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


def service_account_client(
    api: client.ApiClient, cp: ControlPlane, namespace: str, name: str
) -> client.ApiClient:
    token = service_account_token(api, namespace, name)
    cfg = client.Configuration()
    cfg.host = cp.server
    cfg.ssl_ca_cert = str(cp.pki.ca_cert)
    cfg.api_key = {"authorization": token}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    return client.ApiClient(cfg)
