"""Reads of an install, for `recall doctor`: CRDs, Deployments, pods, Leases, the API Priority
and Fairness objects, and what the current user may do.

Read-only but for the reviews it creates (which store nothing). Objects come back as
`RawObject`, or None when missing; a refusal raises `Forbidden`, any other failure
`Unavailable`, so the doctor can say which of the three it met.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from recall.kube.base import Forbidden, RawObject, Unavailable

FLOWCONTROL = "/apis/flowcontrol.apiserver.k8s.io/v1"


class InstallReader:
    """GETs and LISTs of an install through one API client; see the module contract."""

    def __init__(self, api: client.ApiClient, timeout: float = 15.0) -> None:
        self.api = api
        self.timeout = timeout

    def _call(self, method: str, path: str, body: Any = None, query: Any = None) -> Any:
        try:
            request = self.api.param_serialize(
                method,
                path,
                query_params=list((query or {}).items()),
                header_params={"Accept": "application/json", "Content-Type": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self.api.call_api(*request, _request_timeout=self.timeout)
            data = response.read()
        except Exception as e:  # transport: refused, reset, timed out
            raise Unavailable(f"{method} {path}: {e}") from None
        if response.status == 404:
            return None
        if response.status == 403:
            raise Forbidden(f"{method} {path}: {response.reason}", status=403)
        if response.status >= 300:
            raise Unavailable(f"{method} {path}: {response.status} {response.reason}")
        return json.loads(data) if data else None

    def get(self, path: str) -> RawObject | None:
        """The object at `path` (an API path), or None when it does not exist."""
        out = self._call("GET", path)
        return out if isinstance(out, dict) else None

    def items(self, path: str, **query: str) -> list[RawObject]:
        """Every item of the collection at `path` (one page per 500), [] when none is served."""
        items: list[RawObject] = []
        params: dict[str, str] = {"limit": "500", **query}
        while True:
            out = self._call("GET", path, query=params)
            if not isinstance(out, dict):
                return items
            items += out.get("items") or []
            token = (out.get("metadata") or {}).get("continue")
            if not token:
                return items
            params["continue"] = token

    def crd(self, name: str) -> RawObject | None:
        return self.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")

    def deployment(self, namespace: str, name: str) -> RawObject | None:
        return self.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}")

    def pods(self, namespace: str, selector: str) -> list[RawObject]:
        return self.items(f"/api/v1/namespaces/{namespace}/pods", labelSelector=selector)

    def lease(self, namespace: str, name: str) -> RawObject | None:
        return self.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}")

    def leases(self, namespace: str, selector: str) -> list[RawObject]:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        return self.items(path, labelSelector=selector)

    def jobs(self, namespace: str, field_selector: str = "") -> list[RawObject]:
        path = f"/apis/recall.dev/v1alpha1/namespaces/{namespace}/transcriptionjobs"
        query = {"fieldSelector": field_selector} if field_selector else {}
        return self.items(path, **query)

    def flow_schema(self, name: str) -> RawObject | None:
        return self.get(f"{FLOWCONTROL}/flowschemas/{name}")

    def priority_level(self, name: str) -> RawObject | None:
        return self.get(f"{FLOWCONTROL}/prioritylevelconfigurations/{name}")

    def whoami(self) -> str:
        """The current user's name (a SelfSubjectReview), or "" when the server cannot say."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        out = self._call("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body)
        info = ((out or {}).get("status") or {}).get("userInfo") or {}
        return str(info.get("username") or "")

    def may(
        self, namespace: str, verb: str, group: str, resource: str, subresource: str = ""
    ) -> tuple[bool, str]:
        """Whether the current user may `verb` the resource in `namespace` (a
        SelfSubjectAccessReview), and the authorizer's reason."""
        attributes = {"namespace": namespace, "verb": verb, "group": group, "resource": resource}
        if subresource:
            attributes["subresource"] = subresource
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        out = self._call("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body)
        status = (out or {}).get("status") or {}
        return bool(status.get("allowed")), str(status.get("reason") or "")
