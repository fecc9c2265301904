"""Fan-out: the TranscriptionJob a Batch item becomes. Pure; the operator does the creating.

Contract: `job_for_item(batch, item)` is deterministic — the same Batch and item always give
the same name, labels, owner reference and spec — so creating it again after a retried write
or an operator restart finds the existing job (409 AlreadyExists) instead of a duplicate.
Item fields override the Batch's `defaults`; an item with a fixed language takes none of the
defaults' `languageOptions` and `languageScope` (the job's CEL refuses them beside one).
"""

from __future__ import annotations

from typing import Any

from recall.kube import Owner
from recall.operator.reconcile.items import Item
from recall.resources import (
    API_VERSION,
    AUTO,
    LABEL_BATCH,
    LABEL_COMPONENT,
    LABEL_INDEX,
    LABEL_ITEM,
    LABEL_SUSPENDED,
    Batch,
    label_value,
    object_name,
)


def job_name(batch: str, key: str) -> str:
    """`<batch>-<key>`, shortened with a hash when longer than a Kubernetes name may be."""
    return object_name(batch, key)


def job_for_item(batch: Batch, item: Item) -> dict[str, Any]:
    """The TranscriptionJob manifest for one item of `batch`."""
    return {
        "apiVersion": API_VERSION,
        "kind": "TranscriptionJob",
        "metadata": _metadata(batch, item),
        "spec": _spec(batch, item),
    }


def _spec(batch: Batch, item: Item) -> dict[str, Any]:
    d = batch.spec.defaults
    spec: dict[str, Any] = {
        "source": {"url": item.url},
        "batchRef": batch.name,
        "item": item.key,
        "leaseDurationSeconds": d.lease_duration_seconds,
        "maxAttempts": d.max_attempts,
        "maxReleases": d.max_releases,
        "priority": item.priority if item.priority is not None else d.priority,
    }
    language = item.language or d.language
    if language:
        spec["language"] = language
    if language in (None, AUTO):
        if d.language_options:
            spec["languageOptions"] = list(d.language_options)
        if d.language_scope is not None:
            spec["languageScope"] = d.language_scope
    if d.checkpoint_seconds is not None:
        spec["checkpointSeconds"] = d.checkpoint_seconds
    if d.pool is not None:
        spec["pool"] = d.pool
    if d.engine is not None:
        spec["engine"] = d.engine.to_api()
    if d.output is not None:
        spec["output"] = d.output.to_api()
    if d.transcript is not None:
        spec["transcript"] = d.transcript.to_api()
    if d.vocabulary:
        spec["vocabulary"] = list(d.vocabulary)
    return spec


def _metadata(batch: Batch, item: Item) -> dict[str, Any]:
    labels = {
        LABEL_BATCH: label_value(batch.name),
        LABEL_ITEM: item.key,
        LABEL_INDEX: str(item.index),
        LABEL_COMPONENT: "job",
    }
    if batch.spec.suspend:
        labels[LABEL_SUSPENDED] = "true"
    metadata: dict[str, Any] = {
        "name": job_name(batch.name, item.key),
        "namespace": batch.namespace,
        "labels": labels,
    }
    if batch.metadata.uid:
        owner = Owner(API_VERSION, "Batch", batch.name, batch.metadata.uid)
        metadata["ownerReferences"] = [owner.reference()]
    return metadata
