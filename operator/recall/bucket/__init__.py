"""Every object store call: the work's bytes (DESIGN §4b) and the sources in buckets.

- `store`: `Stores` opens a `Bucket` from a URL (s3, gs, az, file; memory in tests) through
  obstore: put once, get, list, delete, copy, presign;
- `errors`: the only errors a caller sees, each with the reason a job or a Batch records.

What lives where in the bucket, and what is garbage, is `recall.transcripts`' business: this
package moves bytes. May import `recall.base` only.
"""

from recall.bucket.errors import (
    StoreAccessDenied,
    StoreBucketMissing,
    StoreConflict,
    StoreError,
    StoreObjectMissing,
    StoreUnavailable,
    StoreUrlInvalid,
)
from recall.bucket.store import Bucket, Location, Stores

__all__ = [
    "Bucket",
    "Location",
    "StoreAccessDenied",
    "StoreBucketMissing",
    "StoreConflict",
    "StoreError",
    "StoreObjectMissing",
    "StoreUnavailable",
    "StoreUrlInvalid",
    "Stores",
]
