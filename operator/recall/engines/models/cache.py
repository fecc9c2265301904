"""The model cache: models from the team's store fetched once per node, checked, renamed into
place under a lock, and packaged models joined into it (`recall.engines.models` states the
contract)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote, urlsplit

from recall.base import log
from recall.base.clock import SYSTEM, Clock
from recall.engines.models.manifests import (
    MANIFEST,
    canonical,
    corrupt,
    digest_of,
    manifest,
    parse_manifest,
    verify,
)
from recall.engines.models.packaged import Packaged, into_place, join, sources_of
from recall.resources.errors import JobFailure

STORE_SCHEMES = ("s3", "gs", "az")
RECHECK_SECONDS = 60.0  # how long a store's manifest is trusted by this process
CORRUPT_SECONDS = 300.0  # how long a corrupt model is remembered as corrupt
LOCK_POLL = 0.2
# The errors of the cache's own files that say this process cannot write there.
UNWRITABLE = frozenset(
    {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR}
)
_log = log.get("models")


class ModelStoreMissing(Exception):
    """A worker's model is in a store, and the worker has no store to read it from (one line)."""


class ModelCacheUnwritable(JobFailure):
    """This process cannot write the model cache `directory` (`error` says why; the contract)."""

    REASON = "ModelCacheUnwritable"

    def __init__(self, directory: Path, error: OSError) -> None:
        super().__init__(self.REASON, _unwritable(directory, error), permanent=False)
        self.directory = directory
        self.errno = error.errno


def _unwritable(directory: Path, error: OSError) -> str:
    uid, gid = os.getuid(), os.getgid()
    what = error.strerror or type(error).__name__
    if error.filename and str(error.filename) != str(directory):
        what += f" ({error.filename})"
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = (
            "free space on its volume (the node's disk, for a hostPath cache), or give an "
            "emptyDir cache a larger worker.modelCache.sizeLimit"
        )
    elif error.errno == errno.EROFS:
        fix = "mount the cache volume read-write"
    else:
        fix = (
            f"make it writable by uid {uid}: the chart's hostPath cache is given to the "
            "workers' UID by its init container model-cache-owner "
            "(worker.modelCache.hostPathInit.enabled); a directory prepared otherwise must be "
            f"owned by uid {uid}"
        )
    return (
        f"the model cache {directory} cannot be written by this worker (uid {uid}, gid {gid}): "
        f"{what}; the worker claims no job until it can: {fix}"
    )


def probe_cache(directory: Path) -> None:
    """Create `directory` if needed and a file in it, as a fetch does (then remove the file);
    `ModelCacheUnwritable` when this process cannot."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=".probe-", dir=directory)
        os.close(fd)
        os.unlink(name)
    except OSError as e:
        raise ModelCacheUnwritable(directory, e) from e


class ModelStore(Protocol):
    """One model directory in a store. Raises `JobFailure` (ModelNotFound, ModelAccessDenied,
    ModelUnavailable) for the store's answers; see the module contract."""

    url: str

    def read(self, name: str) -> bytes | None:
        """A small object's bytes, None when it is missing."""
        ...

    def download(self, name: str, into: Path) -> str:
        """Stream `name` into the file `into`; its sha256 (hex)."""
        ...


OpenStore = Callable[[str], ModelStore]


@dataclass(frozen=True)
class LocalModel:
    """A model ready to load: its directory, where it came from, and its digest."""

    path: Path
    source: str  # the URL or directory it was named by
    digest: str  # sha256:<hex>


def is_store_url(name: str) -> bool:
    return urlsplit(name).scheme.lower() in STORE_SCHEMES


def local_directory(name: str) -> Path | None:
    """The directory a model name means on this machine (a path, or a file:// URL)."""
    if name.startswith("file://"):
        return Path(unquote(urlsplit(name).path))
    if name.startswith("/") or name.startswith("."):
        return Path(name)
    return None


@dataclass
class _Known:
    entries: dict[str, str]
    digest: str
    at: float


class ModelCache:
    """Store models cached in `directory`; see the module contract. Thread-safe."""

    def __init__(
        self,
        directory: Path,
        open_store: OpenStore | None,
        *,
        clock: Clock = SYSTEM,
    ) -> None:
        self.directory = directory
        self.open_store = open_store
        self.clock = clock
        self._lock = threading.Lock()
        self._known: dict[str, _Known] = {}  # url -> its manifest, as last read
        self._corrupt: dict[tuple[str, str], tuple[float, JobFailure]] = {}
        self._checked: dict[Path, str] = {}  # local directories checked: their digests
        self._seen: set[str] = set()  # digests this process found or fetched in the cache

    # -- local directories -------------------------------------------------------------------

    def local(self, directory: Path, source: str) -> LocalModel:
        """A model in a directory of this machine, checked once per process."""
        with self._lock:
            digest = self._checked.get(directory)
        if digest is None:
            if not directory.is_dir():
                raise JobFailure(
                    "ModelNotFound", f"model directory {directory} does not exist", permanent=True
                )
            raw = directory / MANIFEST
            if raw.is_file():
                entries = parse_manifest(raw.read_bytes(), str(directory))
                verify(directory, entries, str(directory))
                digest = digest_of(entries)
            else:
                digest = "sha256:" + hashlib.sha256(manifest(directory)).hexdigest()
            with self._lock:
                self._checked[directory] = digest
        return LocalModel(directory, source, digest)

    # -- store models ------------------------------------------------------------------------

    def resolve(self, url: str, cancel: threading.Event | None = None) -> LocalModel:
        """The local copy of the model at `url`, fetched and checked first if needed."""
        if self.open_store is None:  # a worker's own store model is refused at its start
            raise JobFailure(
                "ModelUnavailable",
                f"{url}: this worker was started without a store to read models from; a "
                "worker with one can take the job",
                permanent=False,
            )
        known = self._manifest(url)
        with self._lock:
            failed = self._corrupt.get((url, known.digest))
        if failed is not None and self.clock.monotonic() - failed[0] < CORRUPT_SECONDS:
            raise failed[1]
        final = self.directory / known.digest.replace(":", "-")
        with self._writing():
            if not final.is_dir():
                self.directory.mkdir(parents=True, exist_ok=True)
                with self._locked(final.with_suffix(".lock"), cancel):
                    if not final.is_dir():  # another process may have fetched it meanwhile
                        self._fetch_checked(url, known, final)
        return self._found(final, url, known.digest)

    # -- packaged models --------------------------------------------------------------------

    def packaged(self, model: Packaged, cancel: threading.Event | None = None) -> LocalModel:
        """A packaged model's cached copy, joined and checked first if needed (the contract)."""
        final = self.directory / model.digest.replace(":", "-")
        with self._writing():
            if not final.is_dir():
                sources = sources_of(model)
                self.directory.mkdir(parents=True, exist_ok=True)
                with self._locked(final.with_suffix(".lock"), cancel):
                    if not final.is_dir():
                        started = self.clock.monotonic()
                        size = join(model, sources, final)
                        self._fetched(
                            model.name, model.digest, final, len(model.parts), size, started
                        )
        return self._found(final, model.name, model.digest)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """OSErrors saying this process cannot write the cache raised as `ModelCacheUnwritable`."""
        try:
            yield
        except OSError as e:
            if e.errno in UNWRITABLE:
                raise ModelCacheUnwritable(self.directory, e) from e
            raise

    def _found(self, final: Path, source: str, digest: str) -> LocalModel:
        """The copy at `final`, logged `model_cached` the first time this process finds it."""
        with self._lock:
            first = digest not in self._seen
            self._seen.add(digest)
        if first:
            _log.info("model_cached", url=source, digest=digest, path=str(final))
        return LocalModel(final, source, digest)

    def _fetch_checked(self, url: str, known: _Known, final: Path) -> None:
        started = self.clock.monotonic()
        try:
            size = self._fetch(url, known, final)
        except JobFailure as e:
            if e.reason == "ModelCorrupt":
                with self._lock:
                    self._corrupt[(url, known.digest)] = (self.clock.monotonic(), e)
            raise
        self._fetched(url, known.digest, final, len(known.entries), size, started)

    def _fetched(
        self, source: str, digest: str, final: Path, files: int, size: int, started: float
    ) -> None:
        """The copy at `final`, new since `started`: found from now on, logged `model_fetched`."""
        with self._lock:
            self._seen.add(digest)
        _log.info(
            "model_fetched",
            url=source,
            digest=digest,
            path=str(final),
            files=files,
            bytes=size,
            seconds=round(self.clock.monotonic() - started, 3),
        )

    def _manifest(self, url: str) -> _Known:
        now = self.clock.monotonic()
        with self._lock:
            known = self._known.get(url)
        if known is not None and now - known.at < RECHECK_SECONDS:
            return known
        assert self.open_store is not None
        try:
            raw = self.open_store(url).read(MANIFEST)
        except JobFailure as e:
            if e.reason == "ModelUnavailable" and known is not None:
                return known  # the store does not answer: the copy known still stands
            raise
        if raw is None:
            raise JobFailure(
                "ModelNotFound",
                f"{url.rstrip('/')}/{MANIFEST} is missing: a model in a store needs its "
                f"{MANIFEST} beside its files (sha256sum * > {MANIFEST})",
                permanent=True,
            )
        entries = parse_manifest(raw, url)
        known = _Known(entries, digest_of(entries), now)
        with self._lock:
            self._known[url] = known
        return known

    @contextlib.contextmanager
    def _locked(self, path: Path, cancel: threading.Event | None) -> Iterator[None]:
        """An exclusive flock on `path`, waited for while `cancel` is not set."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if cancel is None:
                        self.clock.sleep(LOCK_POLL)
                    elif self.clock.wait(cancel, LOCK_POLL):
                        raise JobFailure(
                            "ModelUnavailable", "stopped while waiting for a model", permanent=False
                        ) from None
            yield
        finally:
            os.close(fd)  # releases the lock

    def _fetch(self, url: str, known: _Known, final: Path) -> int:
        """Download, check and rename into place; the bytes downloaded."""
        with into_place(final) as partial:
            store = self.open_store(url) if self.open_store else None
            assert store is not None
            for name, expected in sorted(known.entries.items()):
                got = store.download(name, partial / name)
                if got != expected:
                    raise corrupt(url, name, expected, got)
            (partial / MANIFEST).write_bytes(canonical(known.entries))
            for path in partial.iterdir():
                with path.open("rb") as f:
                    os.fsync(f.fileno())
            return sum((partial / name).stat().st_size for name in known.entries)
