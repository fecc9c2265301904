"""Sources in buckets: an `s3://`, `gs://` or `az://` job source downloaded with the worker's
store credentials (the same ones its results store uses), for the media package to decode.

`object_reader(stores)` is the `recall.media.fetch.ObjectReader` the worker hands to its
engine. It streams the object into a new temporary file under the media's work directory,
refusing one larger than allowed before reading it, and answers each failure as the job
records it: a missing object `SourceNotFound` and refused credentials `SourceAccessDenied`
(permanent: retrying cannot help), a store that does not answer `SourceUnavailable` (retried
with backoff, like an unreachable http source).
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

from recall.bucket import (
    StoreAccessDenied,
    StoreBucketMissing,
    StoreError,
    StoreObjectMissing,
    Stores,
    StoreUnavailable,
)
from recall.media.fetch import ObjectReader, display_url
from recall.resources.errors import JobFailure


def object_reader(stores: Stores) -> ObjectReader:
    def read(url: str, workdir: Path | None, max_bytes: int) -> tuple[Path, str]:
        shown = display_url(url)
        parent, _, name = url.rstrip("/").rpartition("/")
        suffix = Path(name).suffix[:16]
        try:
            bucket = stores.open(parent)
            size = bucket.size(name)
            if size is None:
                raise JobFailure("SourceNotFound", f"{shown}: no such object", permanent=True)
            if size > max_bytes:
                raise JobFailure(
                    "SourceTooLarge",
                    f"{shown}: {size} bytes, the limit is {max_bytes}",
                    permanent=True,
                )
            handle, raw = tempfile.mkstemp(prefix="recall-source-", suffix=suffix, dir=workdir)
            path = Path(raw)
            digest = hashlib.sha256()
            try:
                with open(handle, "wb") as out:
                    for block in bucket.stream(name):
                        digest.update(block)
                        out.write(block)
            except BaseException:
                path.unlink(missing_ok=True)
                raise
            return path, digest.hexdigest()
        except (StoreObjectMissing, StoreBucketMissing) as e:
            raise JobFailure("SourceNotFound", f"{shown}: {e.message}", permanent=True) from None
        except StoreAccessDenied as e:
            raise JobFailure(
                "SourceAccessDenied", f"{shown}: {e.message}", permanent=True
            ) from None
        except StoreUnavailable as e:
            raise JobFailure(
                "SourceUnavailable", f"{shown}: {e.message}", permanent=False
            ) from None
        except StoreError as e:
            raise JobFailure("SourceRejected", f"{shown}: {e.message}", permanent=True) from None

    return read
