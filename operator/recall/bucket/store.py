"""Buckets opened from URLs, through obstore: put once, get, list, delete, copy, presign.

Contract:
- A `Bucket` is a store and a key prefix. Keys are relative to the prefix, '/'-separated, never
  starting with '/'. Every call raises only `recall.bucket.errors.StoreError`s.
- `put(key, data)` is write-once by default (`If-None-Match: *` on S3): the same bytes already
  there are a repeated write whose answer was lost, and succeed; other bytes raise
  `StoreConflict`. Safety never rests on the condition alone (some servers race on it): an
  attempt's keys carry its lease token, and the job's fenced status decides the result.
- `get` and `size` return None for a missing object, `delete` ignores one; a missing bucket,
  refused credentials or a bad URL are errors.
- `copy_to` copies server-side when both buckets share a client (obstore copies within one
  store only), else it streams the object through this process, a part at a time.
- A URL names keys percent-encoded, as S3 and file URIs do: `Location.url` encodes each key
  (keeping '/', letters, digits, `-._~!$&'()*+,;=:@` and the braces of `{key}` placeholders, so
  a plain key's URL reads as the key), `Location.parse` decodes the whole path: `parse(url(key))`
  gives `key` back. A raw '?' or '#' is a character of the key (no query or fragment here).
- One client per (scheme, bucket) of a `Stores`, shared by every prefix in that bucket.
  Requests time out after `StoreSettings.timeout`; the client retries a transient failure at
  most twice within that; how long to keep trying after is the caller's.
- Credentials: each store's standard variables, read by obstore, or for S3 files in
  `StoreSettings.credentials_dir`, re-read every minute so a rotated Secret is picked up
  without a restart.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar
from urllib.parse import quote, unquote

import obstore
from obstore.store import AzureStore, GCSStore, LocalStore, MemoryStore, S3Store

from recall.base import metrics
from recall.base.clock import SYSTEM, Clock
from recall.base.settings import SCHEMES, StoreSettings
from recall.bucket.errors import (
    StoreBucketMissing,
    StoreConflict,
    StoreError,
    StoreUrlInvalid,
    classify,
)

if TYPE_CHECKING:
    from obstore.store import ClientConfig, ObjectStore, RetryConfig, S3Credential

DELETE_BATCH = 500
PART, PARTS = 5 << 20, 4  # a streamed put's part size, and the parts in flight at once
T = TypeVar("T")
# kept as they are in a URL's key: RFC 3986 path characters, and the braces of an output's
# `{key}` placeholders (`recall.transcripts.outputs`)
PLAIN = "/!$&'()*+,;=:@{}"


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str  # relative to the bucket's prefix
    size: int
    modified: dt.datetime


@dataclass(frozen=True, slots=True)
class Location:
    """A parsed store URL: which store, and the key prefix in it (decoded; see the module)."""

    scheme: str
    bucket: str  # bucket, container, or "" for file:// and memory://
    prefix: str

    @classmethod
    def parse(cls, url: str) -> Location:
        # Split by hand: a store URL has no query or fragment, so a raw '?' or '#' is a
        # character of the key (as the URLs `recall submit` wrote before keys were encoded),
        # where urlsplit would cut the key short and name another object.
        scheme, sep, rest = url.strip().partition("://")
        if not sep and url.strip().lower().startswith("file:/"):
            scheme, sep, rest = "file", "://", url.strip()[5:]  # file:/path, no authority
        scheme = scheme.lower()
        if not sep or scheme not in SCHEMES:
            raise StoreUrlInvalid(
                f"{url!r}: unsupported store URL (use s3://bucket/prefix, gs://bucket/prefix, "
                "az://container/prefix or file:///path)"
            )
        netloc, _, path = rest.partition("/")
        if scheme == "file":
            if netloc not in ("", "localhost"):
                raise StoreUrlInvalid(f"{url!r}: a file:// URL names a local path (file:///…)")
            return cls(scheme, "", unquote(path).strip("/"))
        if not netloc:
            raise StoreUrlInvalid(f"{url!r}: the URL names no bucket")
        return cls(scheme, netloc, unquote(path).strip("/"))

    def url(self, key: str = "") -> str:
        path = quote("/".join(p for p in (self.prefix, key) if p), safe=PLAIN)
        if self.scheme == "file":
            return f"file:///{path}"
        return f"{self.scheme}://{self.bucket}/{path}"

    def split(self) -> tuple[Location, str]:
        """The folder holding the object this location names, and the object's key in it."""
        folder, _, name = self.prefix.rpartition("/")
        return Location(self.scheme, self.bucket, folder), name


def allow_http() -> bool:
    """Whether `AWS_ALLOW_HTTP` (or its Google or Azure twin) allows plain-http endpoints."""
    names = ("AWS_ALLOW_HTTP", "GOOGLE_ALLOW_HTTP", "AZURE_ALLOW_HTTP")
    return any(os.environ.get(n, "").strip().lower() in ("1", "true", "yes") for n in names)


class FileCredentials:
    """S3 credentials from files named like their variables (a mounted Secret), expiring
    `refresh` seconds after `clock`'s wall time so obstore reads a rotated Secret again."""

    def __init__(self, directory: Path, refresh: float = 60.0, clock: Clock = SYSTEM) -> None:
        self.directory = directory
        self.refresh = dt.timedelta(seconds=refresh)
        self.clock = clock

    def _read(self, name: str) -> str | None:
        path = self.directory / name
        try:
            return path.read_text().strip() or None
        except FileNotFoundError:
            return None

    def __call__(self) -> S3Credential:
        key, secret = self._read("AWS_ACCESS_KEY_ID"), self._read("AWS_SECRET_ACCESS_KEY")
        if not key or not secret:
            raise StoreError(
                f"{self.directory}: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY files are needed"
            )
        return {
            "access_key_id": key,
            "secret_access_key": secret,
            "token": self._read("AWS_SESSION_TOKEN"),
            "expires_at": self.clock.now() + self.refresh,
        }


class Stores:
    """Opens buckets from URLs with one set of settings (one per process); one client per store."""

    def __init__(self, settings: StoreSettings | None = None) -> None:
        self.settings = settings or StoreSettings()
        self._clients: dict[tuple[str, str], ObjectStore] = {}
        self._lock = threading.Lock()

    def results(self) -> Bucket:
        """The results store of `StoreSettings.url`."""
        if not self.settings.url:
            raise StoreUrlInvalid(
                "no results store is configured: set RECALL_STORE_URL (s3://bucket/prefix, "
                "gs://…, az://… or file:///…)"
            )
        return self.open(self.settings.url)

    def open(self, url: str) -> Bucket:
        location = Location.parse(url)
        return Bucket(self, self._client(location), location)

    def _client(self, location: Location) -> ObjectStore:
        key = (location.scheme, location.bucket)
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                client = self._make(location)
                self._clients[key] = client
            return client

    def _make(self, location: Location) -> ObjectStore:
        s = self.settings
        options: ClientConfig = {
            "timeout": dt.timedelta(seconds=s.timeout),
            "connect_timeout": dt.timedelta(seconds=s.connect_timeout),
        }
        if allow_http():  # given client options, obstore does not read the variable itself
            options["allow_http"] = True
        retry: RetryConfig = {
            "max_retries": 2,
            "retry_timeout": dt.timedelta(seconds=s.timeout),
        }
        common: dict[str, Any] = {"client_options": options, "retry_config": retry}
        try:
            if location.scheme == "s3":
                if s.credentials_dir is not None:
                    common["credential_provider"] = FileCredentials(
                        s.credentials_dir, s.credentials_refresh_seconds
                    )
                return S3Store(location.bucket, **common)
            if location.scheme == "gs":
                return GCSStore(location.bucket, **common)
            if location.scheme == "az":
                return AzureStore(location.bucket, **common)
            if location.scheme == "file":
                return LocalStore("/", mkdir=True)
            return MemoryStore()
        except StoreError:
            raise
        except Exception as e:  # obstore raises plain ValueError/BaseError for bad config
            raise StoreUrlInvalid(f"{location.url()}: cannot open the store: {e}") from None


class Bucket:
    """A store and a key prefix in it; see the module contract."""

    def __init__(self, stores: Stores, client: ObjectStore, location: Location) -> None:
        self.stores = stores
        self.client = client
        self.location = location

    @property
    def url(self) -> str:
        return self.location.url()

    def url_of(self, key: str) -> str:
        return self.location.url(key)

    def _path(self, key: str) -> str:
        key = key.strip("/")
        return "/".join(p for p in (self.location.prefix, key) if p)

    def _key(self, path: str) -> str:
        prefix = self.location.prefix
        return path[len(prefix) + 1 :] if prefix and path.startswith(prefix + "/") else path

    # -- objects ---------------------------------------------------------------------------

    def put(self, key: str, data: bytes, *, once: bool = True) -> None:
        path = self._path(key)
        try:
            with metrics.STORE_SECONDS.labels(operation="put").time():
                obstore.put(self.client, path, data, mode="create" if once else "overwrite")
        except Exception as e:
            error = classify(e, f"put {self.url_of(key)}", write=True)
            if isinstance(error, StoreConflict):
                if self.get(key) == data:
                    return  # our own earlier write, whose answer was lost
                raise StoreConflict(f"{self.url_of(key)} exists already with other bytes") from None
            raise error from None

    def put_file(self, key: str, file: BinaryIO) -> None:
        """`file`'s bytes from its start, sent in parts (multipart on S3) so memory stays bounded
        by `PARTS` parts whatever its size. It overwrites: `key` must be the writer's own (an
        attempt's directory), as a conditional put is one request of the whole object."""
        file.seek(0)
        try:
            with metrics.STORE_SECONDS.labels(operation="put").time():
                obstore.put(self.client, self._path(key), file, max_concurrency=PARTS)
        except Exception as e:
            raise classify(e, f"put {self.url_of(key)}", write=True) from None

    def _read(self, verb: str, key: str, fn: Callable[[str], T]) -> T | None:
        """`fn(path)`, or None when the object is missing (a missing bucket is an error)."""
        what = f"{verb} {self.url_of(key)}"
        try:
            with metrics.STORE_SECONDS.labels(operation=verb).time():
                return fn(self._path(key))
        except FileNotFoundError as e:
            error = classify(e, what)
            if isinstance(error, StoreBucketMissing):
                raise error from None
            return None
        except Exception as e:
            raise classify(e, what) from None

    def get(self, key: str) -> bytes | None:
        return self._read("get", key, lambda path: bytes(obstore.get(self.client, path).bytes()))

    def size(self, key: str) -> int | None:
        return self._read("head", key, lambda path: int(obstore.head(self.client, path)["size"]))

    def exists(self, key: str) -> bool:
        return self.size(key) is not None

    def stream(self, key: str, chunk: int = 1 << 20) -> Iterator[bytes]:
        """The object's bytes, a block at a time (memory stays bounded by a block)."""
        try:
            for block in obstore.get(self.client, self._path(key)).stream(min_chunk_size=chunk):
                yield bytes(block)
        except Exception as e:
            raise classify(e, f"get {self.url_of(key)}") from None

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every object under `prefix` (a key prefix, relative to the bucket's), page by page."""
        path = self._path(prefix) if prefix else (self.location.prefix or None)
        try:
            for page in obstore.list(self.client, path, chunk_size=1000):
                for meta in page:
                    yield ObjectInfo(
                        key=self._key(str(meta["path"])),
                        size=int(meta["size"]),
                        modified=meta["last_modified"],
                    )
        except Exception as e:
            raise classify(e, f"list {self.url_of(prefix)}") from None

    def delete(self, keys: Iterable[str]) -> int:
        """Delete `keys` (missing ones are fine), in batches; returns how many were asked."""
        paths = [self._path(k) for k in keys]
        for i in range(0, len(paths), DELETE_BATCH):
            batch = paths[i : i + DELETE_BATCH]
            try:
                with metrics.STORE_SECONDS.labels(operation="delete").time():
                    obstore.delete(self.client, batch)
            except FileNotFoundError:
                pass
            except Exception as e:
                raise classify(e, f"delete {len(batch)} objects under {self.url}") from None
        return len(paths)

    def copy_to(self, key: str, target: Bucket, target_key: str) -> None:
        """`key` here to `target_key` in `target`: server-side in one store, else streamed."""
        src, dst = self._path(key), target._path(target_key)
        what = f"copy {self.url_of(key)} to {target.url_of(target_key)}"
        if target.client is self.client:
            try:
                with metrics.STORE_SECONDS.labels(operation="copy").time():
                    obstore.copy(self.client, src, dst, overwrite=True)
                return
            except Exception as e:
                raise classify(e, what, write=True) from None
        stream = self._read("get", key, lambda path: obstore.get(self.client, path).stream(PART))
        if stream is None:
            raise StoreError(f"{what}: the source is missing")
        try:  # a writer left by an exception aborts its upload: no partial object is written
            with (
                metrics.STORE_SECONDS.labels(operation="copy").time(),
                obstore.open_writer(
                    target.client, dst, buffer_size=PART, max_concurrency=PARTS
                ) as out,
            ):
                for part in stream:
                    out.write(part)
        except Exception as e:
            raise classify(e, what, write=True) from None

    def sign(self, key: str, seconds: int | None = None) -> str:
        """A presigned GET URL of `key` (s3, gs, az); a file:// URL for a local store."""
        if self.location.scheme in ("file", "memory"):
            return self.url_of(key)
        expires = dt.timedelta(seconds=seconds or self.stores.settings.presign_seconds)
        client = self.client
        if not isinstance(client, S3Store | GCSStore | AzureStore):
            raise StoreError(f"{self.url_of(key)}: this store cannot presign URLs")
        try:
            return obstore.sign(client, "GET", self._path(key), expires)
        except Exception as e:
            raise classify(e, f"sign {self.url_of(key)}") from None
