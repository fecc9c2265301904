"""The state of a chaos run as the API server and the bucket have it: during the drain, which
jobs have not ended (`not_ended`) and whether every Batch converged (`converged`); after it,
whether the operators have settled the bucket (`unsettled`); and at the very end, the final
state the checks read (`read_final`).

Contract: `read_final` is called once every worker and operator of the run was stopped, so
nothing changes while it reads and nothing a process logs comes after it (`Final.read_at`).
It reads the jobs and Batches first, then the bucket: the listing, every accepted result's
transcript (`recall.transcripts.load_transcript`), and each published copy (index entry,
outputs) against the object it copies. It retries while the API server does not answer (about
a minute), then raises.
"""

from __future__ import annotations

import json
import time
from typing import Any

from kubernetes import client

from recall.bucket import Bucket, StoreError
from recall.operator.reconcile.fanout import job_name
from recall.operator.reconcile.project import CODES, stored_phases
from recall.resources import (
    BATCH_PLURAL,
    GROUP,
    ITEM_PHASE_OF_JOB,
    JOB_PLURAL,
    VERSION,
    BatchStatus,
    Phase,
)
from recall.transcripts import load_transcript, output_key
from recall.transcripts.layout import TRANSCRIPT
from recall_dev.chaos.history import Final
from recall_dev.chaos.invariants.objects import expected, output_keys
from recall_dev.chaos.recorder import compact

Obj = dict[str, Any]
TERMINAL = ("Succeeded", "Failed", "Cancelled")


def list_objects(api: client.ApiClient, namespace: str, plural: str) -> list[Obj]:
    out = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, plural, _request_timeout=10
    )
    items: list[Obj] = out.get("items") or []
    return items


def not_ended(api: client.ApiClient, namespace: str, expected: dict[str, str]) -> list[str] | None:
    """The expected jobs that do not exist or are not Succeeded, Failed or Cancelled; None
    when the API server does not answer."""
    try:
        jobs = {o["metadata"]["name"]: o for o in list_objects(api, namespace, JOB_PLURAL)}
    except Exception:
        return None
    return [
        name
        for name in sorted(expected)
        if name not in jobs or (jobs[name].get("status") or {}).get("phase") not in TERMINAL
    ]


def converged(jobs: dict[str, Obj], batches: list[Obj]) -> bool:
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


def unsettled(api: client.ApiClient, namespace: str, bucket: Bucket) -> str | None:
    """What the operators still have to do to the bucket after the drain: publish a Succeeded
    job, collect an unreferenced object; None once neither is left. Raises when the API server
    or the bucket does not answer."""
    jobs = {o["metadata"]["name"]: compact(o) for o in list_objects(api, namespace, JOB_PLURAL)}
    batches = list_objects(api, namespace, BATCH_PLURAL)
    keys = [o.key for o in bucket.list()]
    unpublished = [
        n
        for n, j in jobs.items()
        if j["status"].get("phase") == "Succeeded" and not j["status"].get("published")
    ]
    left = expected(jobs, batches, keys).left
    if not unpublished and not left:
        return None
    return f"{len(unpublished)} jobs unpublished, {len(left)} objects unreferenced"


def read_final(api: client.ApiClient, namespace: str, bucket: Bucket) -> Final:
    """The final state; see the module contract."""
    for attempt in range(20):
        try:
            return _read(api, namespace, bucket)
        except (StoreError, OSError):
            raise
        except Exception:
            time.sleep(0.5 * (attempt + 1))
    raise RuntimeError("the final state could not be read: the API server does not answer")


def _read(api: client.ApiClient, namespace: str, bucket: Bucket) -> Final:
    final = Final(read_at=time.time())
    raw = list_objects(api, namespace, JOB_PLURAL)
    final.jobs = {o["metadata"]["name"]: compact(o) for o in raw}
    final.job_bytes = {
        o["metadata"]["name"]: len(json.dumps(o, separators=(",", ":"))) for o in raw
    }
    final.batches = list_objects(api, namespace, BATCH_PLURAL)
    core = client.CoreV1Api(api)
    maps = core.list_namespaced_config_map(namespace, _request_timeout=10).items or []
    final.config_maps = {
        cm.metadata.name: sum(len(v) for v in (cm.data or {}).values()) for cm in maps
    }
    final.objects = sorted(o.key for o in bucket.list())
    listed = set(final.objects)
    for job in final.jobs.values():
        key = (job["status"].get("result") or {}).get("transcript")
        if key and key in listed:
            final.transcripts[key] = _transcript(bucket, key)
        final.copies.update(_copies(bucket, job, listed))
    return final


def _transcript(bucket: Bucket, key: str) -> Obj:
    """The transcript at `key` as the checks read it, or {"error": ...}."""
    try:
        read = load_transcript(bucket, key)
    except LookupError as e:
        return {"error": str(e)}
    if read is None:
        return {"error": "listed, but missing when read"}
    return {
        "job": read.job,
        "uid": read.uid,
        "attempt": read.attempt,
        "token": read.token,
        "segments": [{"start": g.start, "text": g.text} for g in read.segments],
    }


def _copies(bucket: Bucket, job: Obj, listed: set[str]) -> dict[str, str]:
    """A published job's copies that are in the bucket -> "same" or "differs" from the
    object each copies (the accepted transcript for the index entry, the rendered output for
    each output)."""
    status = job["status"]
    transcript = (status.get("result") or {}).get("transcript")
    published = status.get("published")
    if not transcript or not published:
        return {}
    directory = transcript[: -len(TRANSCRIPT)]
    sources = {}
    if published.get("index"):
        sources[str(published["index"])] = transcript
    for key, fmt in output_keys(job).items():
        sources[key] = output_key(directory, fmt)
    out = {}
    for copy, source in sources.items():
        if copy in listed and source in listed:
            out[copy] = "same" if bucket.get(copy) == bucket.get(source) else "differs"
    return out
