"""The core-API half of `KubeStore`: Events, coordination Leases and ConfigMaps."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes import client

from recall.kube.base import (
    ConfigMapData,
    NotFound,
    ObjectRef,
    Owner,
    Page,
    RawObject,
    WatchEvent,
)
from recall.kube.client import MERGE_PATCH, KubeClient

COMPONENT = "recall"


class KubeCore(KubeClient):
    # -- Events ------------------------------------------------------------------------------

    def post_event(self, about: ObjectRef, type_: str, reason: str, message: str) -> None:
        now = dt.datetime.now(dt.UTC)
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{about.name}.", namespace=about.namespace),
            involved_object=client.V1ObjectReference(
                api_version=about.api_version,
                kind=about.kind,
                name=about.name,
                namespace=about.namespace,
                uid=about.uid,
            ),
            reason=reason,
            message=message[:1024],
            type=type_,
            count=1,
            first_timestamp=now,
            last_timestamp=now,
            source=client.V1EventSource(component=COMPONENT),
            reporting_component=COMPONENT,
            reporting_instance=os.environ.get("POD_NAME") or COMPONENT,
        )
        self._call(
            f"post event {reason} on {about.kind} {about.name}",
            self.core.create_namespaced_event,
            about.namespace,
            body,
            write=True,
        )

    def list_events(self, namespace: str, about: ObjectRef | None = None) -> list[RawObject]:
        kw: dict[str, Any] = {}
        if about is not None:
            kw["field_selector"] = (
                f"involvedObject.kind={about.kind},involvedObject.name={about.name}"
            )
        out = self._call(
            f"list events in {namespace}",
            self.core.list_namespaced_event,
            namespace,
            write=False,
            **kw,
        )
        items: list[RawObject] = self.api.sanitize_for_serialization(out.items)
        return items

    # -- Leases ------------------------------------------------------------------------------

    def get_lease(self, namespace: str, name: str) -> RawObject | None:
        try:
            obj = self._call(
                f"get lease {namespace}/{name}",
                self.coordination.read_namespaced_lease,
                name,
                namespace,
                write=False,
            )
        except NotFound:
            return None
        out: RawObject = self.api.sanitize_for_serialization(obj)
        return out

    def create_lease(self, namespace: str, body: RawObject) -> RawObject:
        obj = self._call(
            f"create lease {namespace}/{body['metadata']['name']}",
            self.coordination.create_namespaced_lease,
            namespace,
            body,
            write=True,
        )
        out: RawObject = self.api.sanitize_for_serialization(obj)
        return out

    def replace_lease(self, namespace: str, name: str, body: RawObject) -> RawObject:
        obj = self._call(
            f"update lease {namespace}/{name}",
            self.coordination.replace_namespaced_lease,
            name,
            namespace,
            body,
            write=True,
        )
        out: RawObject = self.api.sanitize_for_serialization(obj)
        return out

    def delete_lease(self, namespace: str, name: str) -> bool:
        try:
            self._call(
                f"delete lease {namespace}/{name}",
                self.coordination.delete_namespaced_lease,
                name,
                namespace,
                write=True,
            )
        except NotFound:
            return False
        return True

    def list_leases(
        self,
        namespace: str | None,
        labels: str,
        *,
        limit: int | None = None,
        continue_from: str | None = None,
    ) -> Page:
        kw: dict[str, Any] = {"label_selector": labels}
        if limit:
            kw["limit"] = limit
        if continue_from:
            kw["_continue"] = continue_from
        if namespace:
            out = self._call(
                f"list leases in {namespace}",
                self.coordination.list_namespaced_lease,
                namespace,
                write=False,
                **kw,
            )
        else:
            out = self._call(
                "list leases", self.coordination.list_lease_for_all_namespaces, write=False, **kw
            )
        return Page(
            items=self.api.sanitize_for_serialization(out.items),
            resource_version=out.metadata.resource_version or "",
            next=out.metadata._continue or None,
        )

    def watch_leases(
        self, namespace: str | None, resource_version: str, labels: str
    ) -> Iterator[WatchEvent]:
        if namespace:
            func: Callable[..., Any] = self.coordination.list_namespaced_lease
            args: tuple[str, ...] = (namespace,)
        else:
            func = self.coordination.list_lease_for_all_namespaces
            args = ()
        return self._watch("watch leases", func, args, resource_version, {"label_selector": labels})

    # -- ConfigMaps --------------------------------------------------------------------------

    def get_config_map(self, namespace: str, name: str) -> ConfigMapData | None:
        try:
            cm = self._call(
                f"get configmap {namespace}/{name}",
                self.core.read_namespaced_config_map,
                name,
                namespace,
                write=False,
            )
        except NotFound:
            return None
        return ConfigMapData(
            name=name,
            data=dict(cm.data or {}),
            labels=dict(cm.metadata.labels or {}),
            resource_version=cm.metadata.resource_version,
        )

    def create_config_map(
        self,
        namespace: str,
        name: str,
        data: dict[str, str],
        *,
        labels: dict[str, str],
        owner: Owner | None = None,
        immutable: bool = False,
    ) -> None:
        meta = client.V1ObjectMeta(name=name, namespace=namespace, labels=labels)
        if owner is not None:
            meta.owner_references = [
                client.V1OwnerReference(
                    api_version=owner.api_version,
                    kind=owner.kind,
                    name=owner.name,
                    uid=owner.uid,
                    controller=True,
                    block_owner_deletion=False,
                )
            ]
        body = client.V1ConfigMap(metadata=meta, data=data, immutable=immutable or None)
        self._call(
            f"create configmap {namespace}/{name}",
            self.core.create_namespaced_config_map,
            namespace,
            body,
            write=True,
        )

    def patch_config_map(self, namespace: str, name: str, data: dict[str, str]) -> None:
        self._call(
            f"patch configmap {namespace}/{name}",
            self.core.patch_namespaced_config_map,
            name,
            namespace,
            {"data": data},
            write=True,
            _content_type=MERGE_PATCH,
        )

    def own_config_map(self, namespace: str, name: str, owner: Owner) -> None:
        ref = {
            "apiVersion": owner.api_version,
            "kind": owner.kind,
            "name": owner.name,
            "uid": owner.uid,
            "controller": True,
            "blockOwnerDeletion": False,
        }
        self._call(
            f"set the owner of configmap {namespace}/{name}",
            self.core.patch_namespaced_config_map,
            name,
            namespace,
            {"metadata": {"ownerReferences": [ref]}},
            write=True,
            _content_type=MERGE_PATCH,
        )

    def delete_config_map(self, namespace: str, name: str) -> bool:
        try:
            self._call(
                f"delete configmap {namespace}/{name}",
                self.core.delete_namespaced_config_map,
                name,
                namespace,
                write=True,
            )
        except NotFound:
            return False
        return True

    def list_config_maps(self, namespace: str, labels: str) -> list[ConfigMapData]:
        out = self._call(
            f"list configmaps in {namespace}",
            self.core.list_namespaced_config_map,
            namespace,
            write=False,
            label_selector=labels,
        )
        return [
            ConfigMapData(
                name=cm.metadata.name,
                data=dict(cm.data or {}),
                labels=dict(cm.metadata.labels or {}),
                resource_version=cm.metadata.resource_version,
            )
            for cm in out.items
        ]
