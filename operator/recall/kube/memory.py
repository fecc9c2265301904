"""`MemoryStore`: the store in memory, for unit tests of everything above the store.

It keeps what the API server guarantees and the code relies on:
- resourceVersion: every change bumps a global counter; a write that names a stale version gets
  `Conflict`, a write that names none is applied to what is stored;
- the status subresource split: `patch_job_status` and `replace_job_status` change only status,
  `patch_job_labels` only labels, and a created job starts with the CRD's defaults and
  `status: {phase: Queued}`;
- the CRD's transition rules that Python can express (`recall.kube.rules`): a refused write
  raises `Invalid` naming the rule and changes nothing;
- lists and watches with field and label selectors; a watch sends DELETED for an object that
  leaves its selection and ADDED for one that enters it, as the API server's watch cache does,
  and `Conflict(410)` when asked to start before the history it keeps;
- ConfigMaps up to 1 MiB of data (`Invalid` beyond, as the API server answers);
- Deployments with their scale subresource (fenced by resourceVersion), pods and autoscalers
  (`memory_apps`; no controller acts on them: tests play the ReplicaSet and the kubelet).

Fault injection for tests: `inject(Fault(...))` makes matching calls fail, optionally after the
write was applied (`applied=True`: the answer is lost, the change is kept).

Not modelled: admission webhooks, RBAC, garbage collection, finalizers, server-side apply.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

from recall.kube.base import EVERYTHING, Invalid, Page, RawObject, Selector, WatchEvent
from recall.kube.memory_apps import MemoryApps
from recall.kube.memory_core import CONFIG_MAP_LIMIT, JOB_SPEC_DEFAULTS, Fault, _Kind
from recall.kube.patch import apply_merge_patch, matches_labels, merge_patch
from recall.kube.rules import batch_status_rules, job_status_rules
from recall.resources import Batch, TranscriptionJob

__all__ = ["CONFIG_MAP_LIMIT", "Fault", "MemoryStore"]


class MemoryStore(MemoryApps):
    """Jobs, Batches, ConfigMaps, Events and Leases in memory. Thread-safe."""

    def __init__(self, *, watch_seconds: float = 5.0) -> None:
        super().__init__(watch_seconds=watch_seconds)
        self._jobs = _Kind()
        self._batches = _Kind()

    # -- TranscriptionJobs -------------------------------------------------------------------

    def get_job(
        self, namespace: str, name: str, *, timeout: float | None = None
    ) -> TranscriptionJob | None:
        with self._cond:
            self._check("get_job", name)
            obj = self._jobs.objects.get((namespace, name))
            return None if obj is None else TranscriptionJob.from_api(copy.deepcopy(obj))

    def list_jobs(
        self,
        namespace: str | None,
        selector: Selector = EVERYTHING,
        *,
        limit: int | None = None,
        continue_from: str | None = None,
    ) -> Page:
        with self._cond:
            self._check("list_jobs", "")
            return self._list(self._jobs, namespace, selector, limit, continue_from)

    def watch_jobs(
        self, namespace: str | None, resource_version: str, selector: Selector = EVERYTHING
    ) -> Iterator[WatchEvent]:
        return self._watch(self._jobs, namespace, resource_version, selector)

    def create_job(self, namespace: str, manifest: RawObject) -> TranscriptionJob:
        obj = copy.deepcopy(manifest)
        obj["spec"] = {**JOB_SPEC_DEFAULTS, **obj.get("spec", {})}
        obj["status"] = {"phase": "Queued"}
        with self._cond:
            stored = self._create(self._jobs, "create_job", namespace, obj)
            return TranscriptionJob.from_api(stored)

    def patch_job_status(
        self,
        namespace: str,
        name: str,
        resource_version: str | None,
        patch: RawObject,
        *,
        timeout: float | None = None,
    ) -> TranscriptionJob:
        with self._cond:
            fault = self._fault("patch_job_status", name, patch=patch)
            if fault is not None and not fault.applied:
                raise fault.error
            obj = self._get(self._jobs, namespace, name, resource_version)
            status = apply_merge_patch(obj.get("status") or {}, patch)
            broken = job_status_rules(obj.get("status") or {}, status, obj["spec"])
            if broken:
                raise Invalid(
                    f"TranscriptionJob.recall.dev {name!r} is invalid: status: {'; '.join(broken)}",
                    status=422,
                )
            new = {**obj, "status": status}
            stored = self._replace(self._jobs, namespace, name, new)
            if fault is not None:
                raise fault.error
            return TranscriptionJob.from_api(stored)

    def replace_job_status(
        self,
        namespace: str,
        name: str,
        resource_version: str,
        status: RawObject,
        *,
        timeout: float | None = None,
    ) -> TranscriptionJob:
        # A replace meets the faults of patch_job_status: both write the status subresource,
        # and a test's fault (a lost answer, a reset) is about that write, whatever its verb.
        with self._cond:
            current = self._jobs.objects.get((namespace, name)) or {}
            patch = merge_patch(current.get("status") or {}, status)
            fault = self._fault("patch_job_status", name, patch=patch)
            if fault is not None and not fault.applied:
                raise fault.error
            obj = self._get(self._jobs, namespace, name, resource_version)
            old = obj.get("status") or {}
            broken = job_status_rules(old, status, obj["spec"])
            if broken:
                raise Invalid(
                    f"TranscriptionJob.recall.dev {name!r} is invalid: status: {'; '.join(broken)}",
                    status=422,
                )
            stored = self._replace(self._jobs, namespace, name, {**obj, "status": status})
            if fault is not None:
                raise fault.error
            return TranscriptionJob.from_api(stored)

    def patch_job_labels(
        self, namespace: str, name: str, labels: dict[str, str | None]
    ) -> TranscriptionJob:
        with self._cond:
            self._check("patch_job_labels", name)
            obj = self._get(self._jobs, namespace, name, None)
            meta = dict(obj["metadata"])
            meta["labels"] = apply_merge_patch(meta.get("labels") or {}, labels)
            stored = self._replace(self._jobs, namespace, name, {**obj, "metadata": meta})
            return TranscriptionJob.from_api(stored)

    def delete_job(self, namespace: str, name: str) -> bool:
        with self._cond:
            self._check("delete_job", name)
            return self._delete(self._jobs, namespace, name)

    def delete_jobs(self, namespace: str, labels: str) -> None:
        with self._cond:
            self._check("delete_jobs", labels)
            for ns, name in [
                k
                for k, o in self._jobs.objects.items()
                if k[0] == namespace and matches_labels(o["metadata"].get("labels") or {}, labels)
            ]:
                self._delete(self._jobs, ns, name)

    # -- Batches -----------------------------------------------------------------------------

    def get_batch(self, namespace: str, name: str) -> Batch | None:
        with self._cond:
            self._check("get_batch", name)
            obj = self._batches.objects.get((namespace, name))
            return None if obj is None else Batch.from_api(copy.deepcopy(obj))

    def list_batches(self, namespace: str | None) -> list[Batch]:
        with self._cond:
            page = self._list(self._batches, namespace, Selector(), None, None)
            return [Batch.from_api(o) for o in page.items]

    def create_batch(self, namespace: str, manifest: RawObject) -> Batch:
        obj = copy.deepcopy(manifest)
        obj.setdefault("status", {})
        with self._cond:
            return Batch.from_api(self._create(self._batches, "create_batch", namespace, obj))

    def patch_batch_status(
        self, namespace: str, name: str, resource_version: str | None, patch: RawObject
    ) -> Batch:
        with self._cond:
            fault = self._fault("patch_batch_status", name, patch=patch)
            if fault is not None and not fault.applied:
                raise fault.error
            obj = self._get(self._batches, namespace, name, resource_version)
            status = apply_merge_patch(obj.get("status") or {}, patch)
            broken = batch_status_rules(obj.get("status") or {}, status)
            if broken:
                raise Invalid(
                    f"Batch.recall.dev {name!r} is invalid: status: {'; '.join(broken)}",
                    status=422,
                )
            stored = self._replace(self._batches, namespace, name, {**obj, "status": status})
            if fault is not None:
                raise fault.error
            return Batch.from_api(stored)

    def delete_batch(self, namespace: str, name: str) -> bool:
        with self._cond:
            return self._delete(self._batches, namespace, name)

    def dump(self) -> str:
        """Every job, one JSON line each (assertion messages)."""
        import json

        with self._cond:
            return "\n".join(json.dumps(o) for o in self._jobs.objects.values())
