"""The doctor's `store` check: the operator's identity writes, reads and deletes under index/
and lists scratch/; the workers' identity writes and reads under scratch/ and is refused
everywhere else.

It writes only its own probe objects (`.doctor/<random>`) and deletes them; one the operator's
identity could not delete is left to the operator's sweep.
"""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from recall.cli.checks import Check, fail, ok

if TYPE_CHECKING:
    from recall.bucket import Bucket, StoreError

POLICIES = "docs/results-store.md, Bucket policies"


def _store_fix(error: StoreError, whose: str) -> str:
    from recall.bucket import StoreAccessDenied, StoreBucketMissing, StoreUnavailable

    if isinstance(error, StoreAccessDenied):
        return f"give the {whose} identity its bucket policy ({POLICIES})"
    if isinstance(error, StoreBucketMissing):
        return "create the bucket, or set store.url to one that exists"
    if isinstance(error, StoreUnavailable):
        return "check the endpoint (AWS_ENDPOINT_URL, store.env) and networkPolicy.storeEgress"
    return "set store.url to s3://bucket/prefix, gs://…, az://… or file:///…"


def open_bucket(url: str, credentials: Path | None) -> Bucket:
    from recall.base.settings import StoreSettings
    from recall.bucket import Stores

    return Stores(StoreSettings(url=url, credentials_dir=credentials)).results()


def check_store(url: str, operator_dir: Path | None, worker_dir: Path | None) -> Check:
    from recall.bucket import StoreAccessDenied, StoreError

    if not url:
        fix = "pass --store, or install the chart here (its operator names the store)"
        return fail("store", "no results store URL", fix)
    probe = f".doctor/{uuid.uuid4().hex}"
    try:
        operator = open_bucket(url, operator_dir)
        operator.put(f"index/{probe}", b"doctor")
        if operator.get(f"index/{probe}") != b"doctor":
            return fail("store", f"{url} gave other bytes back", "check the store's endpoint")
        operator.delete([f"index/{probe}"])
        next(iter(operator.list("scratch/")), None)
    except StoreError as e:
        detail = f"{url} refuses the operator's identity: {e.reason}: {e.message}"
        return fail("store", detail, _store_fix(e, "operator's"))
    if worker_dir is None:
        return ok("store", f"{url} answers the operator (the workers' identity: no credentials)")
    try:
        worker = open_bucket(url, worker_dir)
        worker.put(f"scratch/{probe}", b"doctor")
        if worker.get(f"scratch/{probe}") != b"doctor":
            return fail("store", f"{url} gave other bytes back", "check the store's endpoint")
    except StoreError as e:
        detail = f"{url} refuses the workers' identity under scratch/: {e.reason}: {e.message}"
        return fail("store", detail, _store_fix(e, "workers'"))
    finally:
        with contextlib.suppress(StoreError):  # else the operator's sweep collects it
            operator.delete([f"scratch/{probe}"])
    reached = []
    for where, key in (("index/", f"index/{probe}"), ("the prefix's top level", probe)):
        try:
            worker.put(key, b"doctor")
        except StoreAccessDenied:
            continue
        except StoreError as e:
            detail = f"{url}: the workers' identity outside scratch/: {e.reason}: {e.message}"
            return fail("store", detail, _store_fix(e, "workers'"))
        reached.append(where)
        operator.delete([key])
    if reached:
        detail = f"{url}: the workers' identity reaches {' and '.join(reached)}, not only scratch/"
        return fail("store", detail, f"narrow it to <prefix>/scratch/* ({POLICIES})")
    return ok("store", f"{url} answers the operator; the workers reach scratch/ and nothing more")
