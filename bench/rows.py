"""The sizes that broke earlier versions, measured again: what a user applies, and what it costs.

- `inline_1000`: a Batch of 1,000 items with 60-character URLs, applied as `recall submit` makes
  it (inline), once the operator wrote its status: the whole object and its parts (spec,
  status, managedFields, kopf's last-handled-configuration annotation).
- `presigned_1000`: 1,000 items with ~1,450-character URLs (presigned links): the CLI puts them
  in item lists; whether the operator fans them out and writes a status, the Batch's size and
  the largest list.
- `oversized_spec`: a Batch whose inline items add up to more than 256 KiB, applied as is (the
  way `kubectl apply` would): the API server's answer.
- `heartbeat`: 4 workers each hold a job at the default lease (120 s) for 100 s of one long
  chunk: status writes per second per leased job while nothing else happens (the heartbeater
  renews every third of the lease), counted from the API server's metrics.
"""

from __future__ import annotations

import json
import time
from typing import Any

from bench.harness import Env, simulated_batch, wait
from recall.cli.submission import Media, submission_for, submit_to
from recall.kube import ApiError
from recall.resources import API_VERSION


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
    except ApiError as e:
        answer = e.message
    out["oversized_spec"] = {"spec_bytes": _bytes(manifest["spec"]), "answer": answer[:300]}
    env.stop([op])
    # A namespace of its own: the Batches above are Queued there and workers would take them.
    out["heartbeat"] = _heartbeat(env, env.namespace())
    return out


def _heartbeat(env: Env, namespace: str, workers: int = 4, hold: float = 100.0) -> dict[str, Any]:
    op = f"operator-{namespace}"
    env.operator(namespace, name=op)
    names = env.workers(namespace, workers, prefix=f"{namespace}-h", idle_exit=3600)
    env.store.create_batch(
        namespace, simulated_batch("hb", workers, lease=120, chunks=1, delay=hold)
    )

    def all_leased() -> bool:
        jobs = [j for j in env.jobs(namespace) if j.spec.batch_ref == "hb"]
        return len(jobs) == workers and all(j.status.lease is not None for j in jobs)

    wait(all_leased, 120, "every heartbeat job to be claimed", every=0.5)
    key = ("PATCH", "transcriptionjobs", "status")
    before, started = env.api_counts()[key], time.monotonic()
    time.sleep(hold - 15)  # within the chunk: only the heartbeater writes
    writes = env.api_counts()[key] - before
    seconds = time.monotonic() - started
    env.stop([*names, op])
    return {
        "lease_seconds": 120,
        "leased_jobs": workers,
        "seconds": round(seconds, 1),
        "status_writes": writes,
        "writes_per_second_per_job": round(writes / seconds / workers, 4),
    }
