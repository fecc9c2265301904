"""Install the recall CRDs into a development cluster and wait until the API server serves them.

The CRD manifests in the checkout's `crds/` are the source of truth (`RECALL_CRDS_DIR` points
elsewhere). In a cluster the Helm chart installs them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from recall.cli.checks import field_paths
from recall.kube.client import load_api_client
from recall_dev.cluster import repo_root


def crds_dir() -> Path:
    override = os.environ.get("RECALL_CRDS_DIR")
    return Path(override) if override else repo_root() / "crds"


def load_crds(directory: Path | None = None) -> list[dict[str, Any]]:
    d = directory or crds_dir()
    return [
        doc for p in sorted(d.glob("*.yaml")) for doc in yaml.safe_load_all(p.read_text()) if doc
    ]


def schema_fields(crd: Mapping[str, Any]) -> set[str]:
    """Every property a CRD's schemas declare, as `<version>.<dotted path>` (an array's items
    `[]`, a map's values `{}`): `v1alpha1.spec.checkpointSeconds`. Two releases' CRDs compare
    by it, and so does a CRD as the API server serves it."""
    return {
        f"{version['name']}{path}"
        for version in crd["spec"]["versions"]
        for path in field_paths((version.get("schema") or {}).get("openAPIV3Schema") or {}, {})
    }


def install_crds(
    kubeconfig: str | None = None, *, timeout: float = 30.0, api: client.ApiClient | None = None
) -> list[str]:
    """Create or update every CRD and wait until it is Established and its storage answers a
    list (the API server's watch cache starts a moment after Established). Returns the names."""
    api = api or load_api_client(kubeconfig)
    ext = client.ApiextensionsV1Api(api)
    names = []
    for crd in load_crds():
        name = crd["metadata"]["name"]
        names.append(name)
        try:
            ext.create_custom_resource_definition(crd)
        except ApiException as e:
            if e.status != 409:
                raise
            current = ext.read_custom_resource_definition(name)
            crd["metadata"]["resourceVersion"] = current.metadata.resource_version
            ext.replace_custom_resource_definition(name, crd)
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            current = ext.read_custom_resource_definition(name)
            conds = {c.type: c.status for c in (current.status.conditions or [])}
            if conds.get("Established") == "True":
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established after {timeout:.0f} s")
            time.sleep(0.1)
    custom = client.CustomObjectsApi(api)
    for crd in load_crds():
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
        version = crd["spec"]["versions"][0]["name"]
        while True:
            try:
                custom.list_cluster_custom_object(group, version, plural, limit=1)
                break
            except ApiException as e:
                if e.status not in (429, 503) or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    return names
