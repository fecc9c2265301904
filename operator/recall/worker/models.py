"""Model directories in buckets, read with the worker's store credentials: the
`recall.engines.models.ModelStore` the worker hands to its engine's model cache.

`model_store(stores)` opens `s3://models/faster-whisper-small/` (or gs://, az://) as a
directory; a failure is answered as `recall.worker.sources.store_failures` does: `ModelNotFound`
and `ModelAccessDenied` permanent, `ModelUnavailable` retried with backoff.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from recall.bucket import Bucket, Stores
from recall.engines.models import ModelStore, OpenStore
from recall.resources.errors import JobFailure
from recall.worker.sources import store_failures


class BucketModel:
    """A model directory in a bucket."""

    def __init__(self, bucket: Bucket) -> None:
        self.bucket = bucket
        self.url = bucket.url

    def read(self, name: str) -> bytes | None:
        with store_failures("Model", self.bucket.url_of(name), "ModelNotFound"):
            return self.bucket.get(name)

    def download(self, name: str, into: Path) -> str:
        where = self.bucket.url_of(name)
        with store_failures("Model", where, "ModelNotFound"):
            if self.bucket.size(name) is None:
                raise JobFailure(
                    "ModelNotFound", f"{where} (named in SHA256SUMS) is missing", permanent=True
                )
            digest = hashlib.sha256()
            with into.open("wb") as out:
                for block in self.bucket.stream(name):
                    digest.update(block)
                    out.write(block)
                out.flush()
                os.fsync(out.fileno())
            return digest.hexdigest()


def model_store(stores: Stores) -> OpenStore:
    def open_model(url: str) -> ModelStore:
        with store_failures("Model", url, "ModelNotFound"):
            return BucketModel(stores.open(url.rstrip("/")))

    return open_model
