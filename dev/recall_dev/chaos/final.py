"""The state of a chaos run as the API server has it: whether every job ended and every Batch
converged (during the drain), and the final state the checks read (`read_final`): every job
and Batch, the accepted results' transcripts read back, and the ConfigMaps left over."""

from __future__ import annotations

import json
import time
from typing import Any

from kubernetes import client

from recall.kube.store import KubeStore
from recall.operator.fanout import job_name
from recall.operator.projection import CODES, stored_phases
from recall.resources import (
    BATCH_PLURAL,
    GROUP,
    ITEM_PHASE_OF_JOB,
    JOB_PLURAL,
    VERSION,
    BatchStatus,
    Phase,
)
from recall.transcripts import LABEL_KIND, MANIFEST, TranscriptStore
from recall.transcripts.cleanup import references
from recall_dev.chaos.history import Final
from recall_dev.chaos.recorder import compact


def list_objects(api: client.ApiClient, namespace: str, plural: str) -> list[dict[str, Any]]:
    out = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, plural, _request_timeout=10
    )
    items: list[dict[str, Any]] = out.get("items") or []
    return items


def all_ended(api: client.ApiClient, namespace: str, expected: dict[str, str]) -> bool:
    """Whether every expected job exists and is Succeeded, Failed or Cancelled; False when the
    API server does not answer."""
    try:
        jobs = {o["metadata"]["name"]: o for o in list_objects(api, namespace, JOB_PLURAL)}
    except Exception:
        return False
    return all(
        name in jobs
        and (jobs[name].get("status") or {}).get("phase") in ("Succeeded", "Failed", "Cancelled")
        for name in expected
    )


def converged(jobs: dict[str, dict[str, Any]], batches: list[dict[str, Any]]) -> bool:
    """Whether every Batch item shows its job's phase."""
    ok = True
    for b in batches:
        items = b["spec"].get("items") or []
        status = BatchStatus.model_validate(b.get("status") or {})
        codes = stored_phases(status, len(items))
        for i, item in enumerate(items):
            job = jobs.get(job_name(b["metadata"]["name"], item["key"]))
            phase = Phase((job or {}).get("status", {}).get("phase") or "Queued")
            if status.counts is None or CODES[codes[i]] != ITEM_PHASE_OF_JOB[phase]:
                ok = False
    return ok


def read_final(api: client.ApiClient, namespace: str) -> Final:
    """The final state, retried while the API server does not answer (about a minute)."""
    final = Final()
    for attempt in range(20):
        try:
            jobs = list_objects(api, namespace, JOB_PLURAL)
            final.jobs = {o["metadata"]["name"]: compact(o) for o in jobs}
            final.batches = list_objects(api, namespace, BATCH_PLURAL)
            final.config_maps, final.chunk_maps = _transcripts(api, namespace, final.jobs)
            return final
        except Exception:
            time.sleep(0.5 * (attempt + 1))
    raise RuntimeError("the final state could not be read: the API server does not answer")


def _transcripts(
    api: client.ApiClient, namespace: str, jobs: dict[str, dict[str, Any]]
) -> tuple[dict[str, dict[str, str]], list[str]]:
    """The accepted results' transcripts read back (as `segments.json`: start and text of
    each segment), and the names of the transcript ConfigMaps that neither a result nor the
    checkpoint of an unfinished job references."""
    store = KubeStore(api, timeout=20)
    by_name = {cm.name: cm for cm in store.list_config_maps(namespace, LABEL_KIND)}
    transcripts: dict[str, dict[str, str]] = {}
    referenced: set[str] = set()
    for job in jobs.values():
        status = job.get("status") or {}
        checkpoint = (status.get("progress") or {}).get("checkpoint")
        if checkpoint and status.get("phase") in ("Queued", "Leased"):
            # A checkpoint a later attempt resumes from: referenced, not left over.
            referenced |= _referenced(store, namespace, checkpoint)
        name = (status.get("result") or {}).get("configMap")
        if not name:
            continue
        referenced |= _referenced(store, namespace, name)
        read = _read_transcript(store, namespace, name)
        if read is not None:
            transcripts[name] = read
    manifests = {n for n, cm in by_name.items() if cm.labels.get(LABEL_KIND) == MANIFEST}
    for name in manifests - referenced:
        transcripts.setdefault(name, {})  # an orphan manifest
    left = sorted(n for n in by_name if n not in referenced and n not in manifests)
    return transcripts, left


def _referenced(store: KubeStore, namespace: str, name: str) -> set[str]:
    """`name` and every ConfigMap its manifest lists; empty when `name` is missing or its
    manifest cannot be read."""
    full = store.get_config_map(namespace, name)
    if full is None:
        return set()
    return references(name, {name: full}) or set()


def _read_transcript(store: KubeStore, namespace: str, name: str) -> dict[str, str] | None:
    """A transcript as `{"segments.json": ...}`, `{"error": ...}` when it cannot be put
    together, None when it is missing."""
    try:
        read = TranscriptStore(store).load_transcript(namespace, name)
    except LookupError as e:
        return {"error": str(e)}
    if read is None:
        return None
    segments = [{"start": g.start, "text": g.text} for g in read.segments]
    return {"segments.json": json.dumps(segments)}
