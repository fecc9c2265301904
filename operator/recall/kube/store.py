"""`KubeStore`: the store backed by the API server, through the official `kubernetes` client.

The runtime's only calls of the client are here and in `client`, `core` (Events, Leases,
ConfigMaps) and `apps` (the worker fleet: its Deployment, scale subresource, pods and
autoscalers). TranscriptionJobs and Batches are read and written below.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from recall.kube.apps import KubeApps
from recall.kube.base import EVERYTHING, NotFound, Page, RawObject, Selector, WatchEvent
from recall.kube.client import (
    MERGE_PATCH,
    api_message,
    current_namespace,
    load_api_client,
    translate,
)
from recall.kube.core import KubeCore
from recall.resources import BATCH_PLURAL, GROUP, JOB_PLURAL, VERSION, Batch, TranscriptionJob

__all__ = [
    "MERGE_PATCH",
    "KubeStore",
    "api_message",
    "current_namespace",
    "load_api_client",
    "translate",
]


class KubeStore(KubeCore, KubeApps):
    """Jobs, Batches, ConfigMaps, Events, Leases and the worker fleet over one API client."""

    def get_job(
        self, namespace: str, name: str, *, timeout: float | None = None
    ) -> TranscriptionJob | None:
        try:
            obj = self._call(
                f"get job {namespace}/{name}",
                self.custom.get_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                JOB_PLURAL,
                name,
                write=False,
                timeout=timeout,
            )
        except NotFound:
            return None
        return TranscriptionJob.from_api(obj)

    def list_jobs(
        self,
        namespace: str | None,
        selector: Selector = EVERYTHING,
        *,
        limit: int | None = None,
        continue_from: str | None = None,
    ) -> Page:
        return self._list(JOB_PLURAL, namespace, selector, limit=limit, continue_from=continue_from)

    def watch_jobs(
        self, namespace: str | None, resource_version: str, selector: Selector = EVERYTHING
    ) -> Iterator[WatchEvent]:
        """Events after `resource_version` until the server ends the watch (`watch_seconds`).

        Raises `Conflict` with status 410 when `resource_version` is too old (list again).
        """
        kw: dict[str, Any] = {}
        if selector.fields:
            kw["field_selector"] = selector.fields
        if selector.labels:
            kw["label_selector"] = selector.labels
        if namespace:
            func: Callable[..., Any] = self.custom.list_namespaced_custom_object
            args: tuple[str, ...] = (GROUP, VERSION, namespace, JOB_PLURAL)
        else:
            func = self.custom.list_cluster_custom_object
            args = (GROUP, VERSION, JOB_PLURAL)
        return self._watch("watch jobs", func, args, resource_version, kw)

    def create_job(self, namespace: str, manifest: RawObject) -> TranscriptionJob:
        name = manifest.get("metadata", {}).get("name", "?")
        obj = self._call(
            f"create job {namespace}/{name}",
            self.custom.create_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            JOB_PLURAL,
            manifest,
            write=True,
        )
        return TranscriptionJob.from_api(obj)

    def patch_job_status(
        self,
        namespace: str,
        name: str,
        resource_version: str | None,
        patch: RawObject,
        *,
        timeout: float | None = None,
    ) -> TranscriptionJob:
        body: RawObject = {"status": patch}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        obj = self._call(
            f"patch status of job {namespace}/{name}",
            self.custom.patch_namespaced_custom_object_status,
            GROUP,
            VERSION,
            namespace,
            JOB_PLURAL,
            name,
            body,
            write=True,
            timeout=timeout,
            _content_type=MERGE_PATCH,
        )
        return TranscriptionJob.from_api(obj)

    def replace_job_status(
        self,
        namespace: str,
        name: str,
        resource_version: str,
        status: RawObject,
        *,
        timeout: float | None = None,
    ) -> TranscriptionJob:
        # The status subresource takes a whole object and keeps all but its status.
        body: RawObject = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "TranscriptionJob",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": resource_version},
            "status": status,
        }
        obj = self._call(
            f"update status of job {namespace}/{name}",
            self.custom.replace_namespaced_custom_object_status,
            GROUP,
            VERSION,
            namespace,
            JOB_PLURAL,
            name,
            body,
            write=True,
            timeout=timeout,
        )
        return TranscriptionJob.from_api(obj)

    def patch_job_labels(
        self, namespace: str, name: str, labels: dict[str, str | None]
    ) -> TranscriptionJob:
        obj = self._call(
            f"label job {namespace}/{name}",
            self.custom.patch_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            JOB_PLURAL,
            name,
            {"metadata": {"labels": labels}},
            write=True,
            _content_type=MERGE_PATCH,
        )
        return TranscriptionJob.from_api(obj)

    def delete_job(self, namespace: str, name: str) -> bool:
        try:
            self._call(
                f"delete job {namespace}/{name}",
                self.custom.delete_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                JOB_PLURAL,
                name,
                write=True,
                propagation_policy="Background",
            )
        except NotFound:
            return False
        return True

    def delete_jobs(self, namespace: str, labels: str) -> None:
        """One request; a Batch of 100,000 jobs takes the API server a while, hence the long
        timeout (a retry after a timeout deletes what is left)."""
        self._call(
            f"delete jobs {labels} in {namespace}",
            self.custom.delete_collection_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            JOB_PLURAL,
            write=True,
            timeout=max(self.timeout, 600.0),
            label_selector=labels,
            propagation_policy="Background",
        )

    # -- Batches -----------------------------------------------------------------------------

    def get_batch(self, namespace: str, name: str) -> Batch | None:
        try:
            obj = self._call(
                f"get batch {namespace}/{name}",
                self.custom.get_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                BATCH_PLURAL,
                name,
                write=False,
            )
        except NotFound:
            return None
        return Batch.from_api(obj)

    def list_batches(self, namespace: str | None) -> list[Batch]:
        page = self._list(BATCH_PLURAL, namespace, Selector())
        return [Batch.from_api(o) for o in page.items]

    def create_batch(self, namespace: str, manifest: RawObject) -> Batch:
        name = manifest.get("metadata", {}).get("name", "?")
        obj = self._call(
            f"create batch {namespace}/{name}",
            self.custom.create_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            BATCH_PLURAL,
            manifest,
            write=True,
        )
        return Batch.from_api(obj)

    def patch_batch_status(
        self, namespace: str, name: str, resource_version: str | None, patch: RawObject
    ) -> Batch:
        body: RawObject = {"status": patch}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        obj = self._call(
            f"patch status of batch {namespace}/{name}",
            self.custom.patch_namespaced_custom_object_status,
            GROUP,
            VERSION,
            namespace,
            BATCH_PLURAL,
            name,
            body,
            write=True,
            _content_type=MERGE_PATCH,
        )
        return Batch.from_api(obj)

    # -- discovery ---------------------------------------------------------------------------

    def served_plurals(self) -> frozenset[str]:
        """The resources the API server's discovery serves in recall.dev/v1alpha1 right now.

        Empty while the group is not served: the CRDs are missing, or an API server that has
        just started has not installed their paths yet.
        """
        try:
            out = self._call(
                f"discover {GROUP}/{VERSION}",
                self.custom.get_api_resources,
                GROUP,
                VERSION,
                write=False,
            )
        except NotFound:
            return frozenset()
        return frozenset(r.name for r in (out.resources or []) if "/" not in r.name)
