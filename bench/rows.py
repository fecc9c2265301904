"""The sizes that broke earlier versions, measured again: what a user applies, and what it costs.

- `inline_1000`: a Batch of 1,000 items with 60-character URLs, applied as `recall submit` makes
  it (inline), once the operator wrote its status: the whole object and its parts (spec,
  status, managedFields, kopf's last-handled-configuration annotation).
- `presigned_1000`: 1,000 items with ~1,450-character URLs (presigned links): the CLI puts them
  in item lists; whether the operator fans them out and writes a status, the Batch's size and
  the largest list.
- `oversized_spec`: a Batch whose inline items add up to more than 256 KiB, applied as is (the
  way `kubectl apply` would): the API server's answer.
"""

from __future__ import annotations

import json
from typing import Any

from bench.harness import Env, wait
from recall.client import Media, submission_for, submit_to
from recall.models import API_VERSION
from recall.store import StoreError


def _bytes(obj: Any) -> int:
    return len(json.dumps(obj, separators=(",", ":")))


def _raw_batch(env: Env, namespace: str, name: str) -> dict[str, Any]:
    raw: dict[str, Any] = env.store.custom.get_namespaced_custom_object(
        "recall.dev", "v1alpha1", namespace, "batches", name
    )
    return raw


def _parts(raw: dict[str, Any]) -> dict[str, int]:
    meta = raw.get("metadata") or {}
    annotation = (meta.get("annotations") or {}).get("recall.dev/last-handled-configuration", "")
    return {
        "object_bytes": _bytes(raw),
        "spec_bytes": _bytes(raw.get("spec") or {}),
        "status_bytes": _bytes(raw.get("status") or {}),
        "managed_fields_bytes": _bytes(meta.get("managedFields") or []),
        "kopf_annotation_bytes": len(annotation),
    }


def _submitted(env: Env, namespace: str, name: str, url: str) -> dict[str, Any]:
    media = [Media(key=f"{i:04d}", url=url.format(i=i)) for i in range(1000)]
    plan = submission_for(media, name=name, engine="simulated", lease_seconds=30)
    submit_to(env.store, namespace, plan)

    def projected() -> bool:
        b = env.store.get_batch(namespace, name)
        return b is not None and b.status.counts is not None and b.status.counts.total == 1000

    wait(projected, 300, f"the status of {name}", every=1.0)
    raw = _raw_batch(env, namespace, name)
    out: dict[str, Any] = {"items_inline": len(raw["spec"].get("items") or [])}
    out["item_lists"] = len(plan.lists)
    out["largest_list_bytes"] = max((len(t) for t in plan.lists.values()), default=0)
    out.update(_parts(raw))
    return out


def measure(env: Env) -> dict[str, Any]:
    ns = env.namespace()
    op = f"operator-{ns}"
    env.operator(ns, name=op, dispatch="false")
    out: dict[str, Any] = {}
    out["inline_1000"] = _submitted(env, ns, "inline", "https://media.example.com/t/{i:05d}.mp3")
    presigned = "https://bucket.s3.example.com/talks/{i:05d}.mp3?" + "X-Amz-Signature=" + "a" * 1380
    out["presigned_1000"] = _submitted(env, ns, "presigned", presigned)
    items = [{"key": f"{i:04d}", "source": {"url": presigned.format(i=i)}} for i in range(200)]
    manifest = {
        "apiVersion": API_VERSION,
        "kind": "Batch",
        "metadata": {"name": "oversized"},
        "spec": {"items": items, "defaults": {"engine": {"name": "simulated"}}},
    }
    try:
        env.store.create_batch(ns, manifest)
        answer = "accepted"
    except StoreError as e:
        answer = e.message
    out["oversized_spec"] = {"spec_bytes": _bytes(manifest["spec"]), "answer": answer[:300]}
    env.stop([op])
    return out
