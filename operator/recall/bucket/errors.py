"""What an object store can answer, as typed errors (never raw client exceptions or statuses).

Every error carries a CamelCase `reason` a job or a Batch condition can record; its type says
whether a retry can help:

- `StoreUnavailable` (transient, worth repeating): a timeout, a refused or reset connection, a
  5xx, throttling. `maybe_applied` is True when a write may have landed (sent, no answer).
- `StoreAccessDenied`: wrong or missing credentials, or a policy that refuses the action.
- `StoreBucketMissing`: the bucket or container does not exist.
- `StoreUrlInvalid`: a URL no store can be opened from.
- `StoreConflict`: a write-once object exists with other bytes.
- `StoreObjectMissing`: an object a call needed is not there (the source of a copy); a get of a
  missing object is not an error (`Bucket.get` returns None).
- `StoreRefused`: any other answer that repeating will not change (4xx).

Credentials never appear in a message (the client does not print them; request URLs do not
carry them).
"""

from __future__ import annotations

import re

from obstore.exceptions import (
    AlreadyExistsError,
    BaseError,
    InvalidPathError,
    NotSupportedError,
    PermissionDeniedError,
    UnauthenticatedError,
)


class StoreError(Exception):
    """An object store call that did not do what was asked."""

    reason = "StorageError"

    def __init__(self, message: str, *, maybe_applied: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.maybe_applied = maybe_applied


class StoreUnavailable(StoreError):
    reason = "StorageUnavailable"


class StoreAccessDenied(StoreError):
    reason = "StorageAccessDenied"


class StoreBucketMissing(StoreError):
    reason = "StorageBucketMissing"


class StoreUrlInvalid(StoreError):
    reason = "StorageUrlInvalid"


class StoreConflict(StoreError):
    reason = "StorageConflict"


class StoreRefused(StoreError):
    reason = "StorageRefused"


class StoreObjectMissing(StoreError):
    reason = "StorageObjectMissing"


_MISSING_BUCKET = re.compile(
    r"NoSuchBucket|NoSuchContainer|ContainerNotFound|bucket does not exist|"
    r"The specified bucket does not exist",
    re.IGNORECASE,
)
_CLIENT_STATUS = re.compile(r"status code: (4\d\d)")
_XML_DETAIL = re.compile(r"<(Code|Message)>([^<]{1,200})</")


def _detail(text: str) -> str:
    """The store's own code and message when it sent them, else the client's first line."""
    found: dict[str, str] = {m.group(1): m.group(2) for m in _XML_DETAIL.finditer(text)}
    if found:
        return ": ".join(v for v in (found.get("Code"), found.get("Message")) if v)
    return text.strip().splitlines()[0][:300] if text.strip() else "no detail"


def classify(exc: BaseException, what: str, *, write: bool = False) -> StoreError:
    """The typed error for `exc`, raised while doing `what` (named in its message)."""
    text = str(exc)
    detail = _detail(text)
    if isinstance(exc, PermissionDeniedError | UnauthenticatedError):
        return StoreAccessDenied(f"{what}: access denied ({detail})")
    if _MISSING_BUCKET.search(text):  # a 404 on get and put, a generic error on list
        return StoreBucketMissing(f"{what}: the bucket does not exist ({detail})")
    if isinstance(exc, FileNotFoundError):
        return StoreObjectMissing(f"{what}: no such object ({detail})")
    if isinstance(exc, AlreadyExistsError):
        return StoreConflict(f"{what}: the object exists already ({detail})")
    if isinstance(exc, InvalidPathError | NotSupportedError):
        return StoreRefused(f"{what}: {detail}")
    status = _CLIENT_STATUS.search(text)
    if status is not None and status.group(1) not in ("408", "429"):
        if status.group(1) in ("401", "403"):
            return StoreAccessDenied(f"{what}: access denied ({detail})")
        return StoreRefused(f"{what}: the store refused ({detail})")
    if isinstance(exc, BaseError | OSError | TimeoutError):
        return StoreUnavailable(f"{what}: the store did not answer ({detail})", maybe_applied=write)
    return StoreUnavailable(f"{what}: {type(exc).__name__}: {detail}", maybe_applied=write)
