"""Sources in buckets: an `s3://`, `gs://` or `az://` job source downloaded with the worker's
store credentials (those of its results store), for the media package to decode.

`object_reader(stores)` is the `recall.media.fetch.ObjectReader` the worker hands to its engine:
it streams the object into a new temporary file under the media's work directory, refusing one
larger than allowed before reading it. The URL's whole path is the object's key, percent-decoded
(`recall.bucket.Location`: `s3://media/talks/my%20talk.wav` is the key `talks/my talk.wav`, as
`recall submit` lists it). `store_failures` answers each store failure as the job
records it (for the model directories of `recall.worker.models` too): a missing object or bucket
`<kind>NotFound` and refused credentials `<kind>AccessDenied` (permanent: retrying cannot help),
a store that does not answer `<kind>Unavailable` (retried with backoff, like an unreachable http
source), any other `StoreError` as `otherwise` (permanent).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from recall.bucket import (
    Location,
    StoreAccessDenied,
    StoreBucketMissing,
    StoreError,
    StoreObjectMissing,
    Stores,
    StoreUnavailable,
)
from recall.media.fetch import ObjectReader, display_url, save
from recall.resources.errors import JobFailure

_ANSWERS: dict[type[StoreError], str] = {
    StoreObjectMissing: "NotFound",
    StoreBucketMissing: "NotFound",
    StoreAccessDenied: "AccessDenied",
    StoreUnavailable: "Unavailable",
}


@contextmanager
def store_failures(kind: str, where: str, otherwise: str) -> Iterator[None]:
    """A `StoreError` in the block raised as a `JobFailure` (see the module), its message
    `where: <the store's message>`."""
    try:
        yield
    except StoreError as e:
        answer = _ANSWERS.get(type(e))
        raise JobFailure(
            kind + answer if answer else otherwise,
            f"{where}: {e.message}",
            permanent=not isinstance(e, StoreUnavailable),
        ) from None


def object_reader(stores: Stores) -> ObjectReader:
    def read(url: str, workdir: Path | None, max_bytes: int) -> tuple[Path, str]:
        shown = display_url(url)
        with store_failures("Source", shown, "SourceRejected"):
            folder, name = Location.parse(url).split()
            if not name:
                raise JobFailure("SourceRejected", f"{shown}: names no object", permanent=True)
            bucket = stores.open(folder.url())
            size = bucket.size(name)
            if size is None:
                raise JobFailure("SourceNotFound", f"{shown}: no such object", permanent=True)
            if size > max_bytes:
                raise JobFailure(
                    "SourceTooLarge",
                    f"{shown}: {size} bytes, the limit is {max_bytes}",
                    permanent=True,
                )
            return save(
                bucket.stream(name), shown, None, workdir, Path(name).suffix[:16], "recall-source-"
            )

    return read
