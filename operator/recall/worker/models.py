"""Model directories in buckets, read with the worker's store credentials: the
`recall.engines.models.ModelStore` the worker hands to its engine's model cache.

`model_store(stores)` opens `s3://models/faster-whisper-small/` (or gs://, az://) as a
directory and answers each failure as the job records it: a missing bucket or object
`ModelNotFound` and refused credentials `ModelAccessDenied` (permanent: retrying cannot help),
a store that does not answer `ModelUnavailable` (retried with backoff).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from recall.bucket import (
    Bucket,
    StoreAccessDenied,
    StoreBucketMissing,
    StoreError,
    StoreObjectMissing,
    Stores,
    StoreUnavailable,
)
from recall.engines.models import ModelStore, OpenStore
from recall.resources.errors import JobFailure

T = TypeVar("T")


def _answer(url: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except (StoreObjectMissing, StoreBucketMissing) as e:
        raise JobFailure("ModelNotFound", f"{url}: {e.message}", permanent=True) from None
    except StoreAccessDenied as e:
        raise JobFailure("ModelAccessDenied", f"{url}: {e.message}", permanent=True) from None
    except StoreUnavailable as e:
        raise JobFailure("ModelUnavailable", f"{url}: {e.message}", permanent=False) from None
    except StoreError as e:
        raise JobFailure("ModelNotFound", f"{url}: {e.message}", permanent=True) from None


class BucketModel:
    """A model directory in a bucket."""

    def __init__(self, bucket: Bucket) -> None:
        self.bucket = bucket
        self.url = bucket.url

    def read(self, name: str) -> bytes | None:
        return _answer(self.bucket.url_of(name), lambda: self.bucket.get(name))

    def download(self, name: str, into: Path) -> str:
        where = self.bucket.url_of(name)

        def copy() -> str:
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

        return _answer(where, copy)


def model_store(stores: Stores) -> OpenStore:
    def open_model(url: str) -> ModelStore:
        return BucketModel(_answer(url, lambda: stores.open(url.rstrip("/"))))

    return open_model
