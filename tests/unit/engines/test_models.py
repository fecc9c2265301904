"""The model cache on a local store: manifests, digests, the lock, atomic copies, failures, a
cache this process cannot write, and what each process logs."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from recall.engines.models import ModelCache, ModelCacheUnwritable, ModelStoreMissing, probe_cache
from recall.engines.models.cache import CORRUPT_SECONDS, RECHECK_SECONDS
from recall.engines.models.manifests import MANIFEST, manifest, parse_manifest
from recall.resources.errors import JobFailure
from recall_dev.twin.clock import FakeClock


class DirStore:
    """A model directory on disk, read as a store would be; counts downloads."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.url = root.as_uri()
        self.downloads: list[str] = []

    def read(self, name: str) -> bytes | None:
        path = self.root / name
        return path.read_bytes() if path.exists() else None

    def download(self, name: str, into: Path) -> str:
        self.downloads.append(name)
        data = (self.root / name).read_bytes()
        into.write_bytes(data)
        return hashlib.sha256(data).hexdigest()


def model_dir(tmp: Path, name: str = "model") -> Path:
    d = tmp / name
    d.mkdir()
    (d / "model.bin").write_bytes(b"weights" * 100)
    (d / "config.json").write_text("{}")
    (d / MANIFEST).write_bytes(manifest(d))
    return d


def test_digest__the_same_files_the_same_digest_wherever_and_in_any_order(tmp_path: Path) -> None:
    d = model_dir(tmp_path)
    entries = parse_manifest((d / MANIFEST).read_bytes(), "x")
    reordered = "".join(f"{h} *{n}\n" for n, h in reversed(sorted(entries.items())))
    again = parse_manifest((reordered + f"{'0' * 64}  {MANIFEST}\n").encode(), "x")
    assert again == entries  # binary-mode marks, another order, the manifest itself listed
    cache = ModelCache(tmp_path / "cache", None)
    local = cache.local(d, str(d))
    copy = tmp_path / "copy"
    copy.mkdir()
    for p in d.iterdir():
        if p.name != MANIFEST:
            (copy / p.name).write_bytes(p.read_bytes())
    assert cache.local(copy, str(copy)).digest == local.digest  # computed, not read


@pytest.mark.parametrize(
    "text", ["not a manifest", f"{'a' * 64}  ../escape", f"{'a' * 64}  sub/file", ""]
)
def test_manifest__anything_else_is_invalid(text: str) -> None:
    with pytest.raises(JobFailure) as info:
        parse_manifest(text.encode(), "s3://m/x/")
    assert (info.value.reason, info.value.permanent) == ("ModelInvalid", True)


def test_resolve__fetched_once_then_from_the_cache(tmp_path: Path) -> None:
    store = DirStore(model_dir(tmp_path))
    cache = ModelCache(tmp_path / "cache", lambda url: store)
    first = cache.resolve("s3://models/x/")
    assert sorted(store.downloads) == ["config.json", "model.bin"]
    assert (first.path / "model.bin").read_bytes() == b"weights" * 100
    other = ModelCache(tmp_path / "cache", lambda url: store)  # another process, same node
    assert other.resolve("s3://models/x/").path == first.path
    assert len(store.downloads) == 2


def test_resolve__concurrent_fetches_download_once(tmp_path: Path) -> None:
    store = DirStore(model_dir(tmp_path))
    caches = [ModelCache(tmp_path / "cache", lambda url: store) for _ in range(4)]
    found: list[Path] = []
    threads = [
        threading.Thread(target=lambda c=c: found.append(c.resolve("s3://models/x/").path))
        for c in caches
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(set(found)) == 1 and len(found) == 4
    assert sorted(store.downloads) == ["config.json", "model.bin"]


def test_resolve__a_corrupt_file_fails_for_good_and_is_remembered(tmp_path: Path) -> None:
    d = model_dir(tmp_path)
    (d / "model.bin").write_bytes(b"other weights")
    store = DirStore(d)
    cache = ModelCache(tmp_path / "cache", lambda url: store)
    for _ in range(2):
        with pytest.raises(JobFailure) as info:
            cache.resolve("s3://models/x/")
        assert (info.value.reason, info.value.permanent) == ("ModelCorrupt", True)
        assert "model.bin" in info.value.message
    assert store.downloads.count("model.bin") == 1  # the second job is told at once
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")] == []


def test_local__a_directory_checked_against_its_manifest(tmp_path: Path) -> None:
    d = model_dir(tmp_path)
    (d / "config.json").write_text('{"changed": true}')
    with pytest.raises(JobFailure) as info:
        ModelCache(tmp_path / "cache", None).local(d, str(d))
    assert info.value.reason == "ModelCorrupt" and "config.json" in info.value.message
    with pytest.raises(JobFailure) as missing:
        ModelCache(tmp_path / "cache", None).local(tmp_path / "nowhere", "nowhere")
    assert missing.value.reason == "ModelNotFound"


def test_resolve__without_a_store_a_jobs_store_model_is_retried_not_failed(
    tmp_path: Path,
) -> None:
    """A job naming a store URL on an engine built without a store: `ModelUnavailable`,
    retriable (the job is not at fault; a worker with a store can take it), as documented."""
    with pytest.raises(JobFailure) as info:
        ModelCache(tmp_path / "cache", None).resolve("s3://models/small/")
    assert (info.value.reason, info.value.permanent) == ("ModelUnavailable", False)
    assert "without a store" in info.value.message


def test_engine__a_workers_own_store_model_without_a_store_refuses_to_start(
    tmp_path: Path,
) -> None:
    """The pool's misconfiguration is found when the worker's engine is built, not by
    failing its jobs one by one."""
    from recall.engines.whisper import WhisperEngine

    with pytest.raises(ModelStoreMissing, match=r"s3://models/small/.*no store"):
        WhisperEngine(model="s3://models/small/", device="cpu")
    with pytest.raises(ModelStoreMissing):
        WhisperEngine(model="s3://models/small/", models=ModelCache(tmp_path, None), device="cpu")
    store = DirStore(model_dir(tmp_path))
    WhisperEngine(model="s3://models/small/", models=ModelCache(tmp_path, lambda u: store))
    WhisperEngine(model=None, device="cpu")  # the bundled model needs no store


# --- a cache this process cannot write ------------------------------------------------------


def as_another_user(fn: Callable[[], dict[str, object]]) -> dict[str, object]:
    """`fn()` run by a process that is not root and owns nothing here, so the kernel applies
    file permissions to it: as root, in a forked child that drops to UID/GID 65534 (root
    passes every permission check, so chmod alone would prove nothing); otherwise in this
    process, which is no root either. Returns what `fn` returned (JSON), or its exception."""
    if os.getuid() != 0:
        return fn()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            out = fn()
        except BaseException as e:  # reported, not raised: this process must end here
            out = {"raised": f"{type(e).__name__}: {e}"}
            code = 1
        os.write(write, json.dumps(out).encode())
        os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        answer = json.loads(f.read() or b"{}")
    os.waitpid(pid, 0)
    return answer  # type: ignore[no-any-return]


def shared_dir() -> Path:
    """A directory outside pytest's own (root-only, 0700) temporary tree, that anyone can
    traverse and read, owned by root: as the kubelet makes a hostPath directory."""
    d = Path(tempfile.mkdtemp(prefix="recall-cache-test-"))
    d.chmod(0o755)
    return d


def test_resolve__a_cache_owned_by_root_is_unwritable_naming_the_directory_uid_and_fix() -> None:
    """What a worker (UID 10001) meets in a hostPath directory the kubelet created (root,
    0755) without the chart's init container: the kernel's EACCES on the lock file becomes
    `ModelCacheUnwritable`, retriable, naming the directory, the UID and the fix — and a copy
    already in place (fetched by someone who can write) is still used from that directory."""
    base = shared_dir()
    try:
        store = DirStore(model_dir(base))
        cache_dir = base / "models"
        cache_dir.mkdir(mode=0o755)  # root's, as DirectoryOrCreate makes it

        def resolve() -> dict[str, object]:
            try:
                found = ModelCache(cache_dir, lambda url: store).resolve("s3://models/x/")
            except ModelCacheUnwritable as e:
                return {
                    "reason": e.reason,
                    "permanent": e.permanent,
                    "message": e.message,
                    "errno": e.errno,
                    "uid": os.getuid(),
                }
            return {"path": str(found.path), "digest": found.digest}

        denied = as_another_user(resolve)
        assert (denied.get("reason"), denied.get("permanent")) == ("ModelCacheUnwritable", False)
        assert denied["errno"] == errno.EACCES, denied
        message = str(denied["message"])
        assert str(cache_dir) in message and f"uid {denied['uid']}" in message
        assert "model-cache-owner" in message and "hostPathInit" in message  # the fix
        assert store.downloads == []  # nothing was fetched for nothing
        assert sorted(p.name for p in cache_dir.iterdir()) == []  # nor left behind

        fetched = ModelCache(cache_dir, lambda url: store).resolve("s3://models/x/")  # root
        again = as_another_user(resolve)
        assert again == {"path": str(fetched.path), "digest": fetched.digest}
    finally:
        shutil.rmtree(base)


def test_resolve__a_corrupt_model_is_remembered_for_its_time_on_the_caches_clock(
    tmp_path: Path,
) -> None:
    d = model_dir(tmp_path)
    good = (d / "model.bin").read_bytes()
    (d / "model.bin").write_bytes(b"other weights")
    store, clock = DirStore(d), FakeClock()
    cache = ModelCache(tmp_path / "cache", lambda url: store, clock=clock)
    with pytest.raises(JobFailure, match=r"model\.bin"):
        cache.resolve("s3://models/x/")
    downloads = len(store.downloads)
    (d / "model.bin").write_bytes(good)  # mended in the store, under the same manifest
    clock.step(CORRUPT_SECONDS - 1)
    with pytest.raises(JobFailure, match=r"model\.bin"):
        cache.resolve("s3://models/x/")
    assert len(store.downloads) == downloads  # remembered: not downloaded again
    clock.step(1)
    assert (cache.resolve("s3://models/x/").path / "model.bin").read_bytes() == good


def test_resolve__the_manifest_is_read_again_once_a_minute_on_the_caches_clock(
    tmp_path: Path,
) -> None:
    class CountingStore(DirStore):
        reads = 0

        def read(self, name: str) -> bytes | None:
            self.reads += 1
            return super().read(name)

    store, clock = CountingStore(model_dir(tmp_path)), FakeClock()
    cache = ModelCache(tmp_path / "cache", lambda url: store, clock=clock)
    cache.resolve("s3://models/x/")
    clock.step(RECHECK_SECONDS - 1)
    cache.resolve("s3://models/x/")
    assert store.reads == 1
    clock.step(1)
    cache.resolve("s3://models/x/")
    assert store.reads == 2


@pytest.mark.parametrize(
    ("code", "fix"),
    [(errno.ENOSPC, "free space"), (errno.EROFS, "read-write"), (errno.EACCES, "uid")],
)
def test_resolve__a_full_or_read_only_volume_is_unwritable_and_leaves_nothing_partial(
    tmp_path: Path, code: int, fix: str
) -> None:
    """The error a full or read-only volume gives a download writing the model file, injected
    where it would come (the kernel's own answer is what the test above shows for EACCES):
    mapped to `ModelCacheUnwritable` with its fix, and the partial copy removed."""

    class FailingStore(DirStore):
        def download(self, name: str, into: Path) -> str:
            raise OSError(code, os.strerror(code), str(into))

    store = FailingStore(model_dir(tmp_path))
    with pytest.raises(ModelCacheUnwritable) as info:
        ModelCache(tmp_path / "cache", lambda url: store).resolve("s3://models/x/")
    assert (info.value.reason, info.value.permanent, info.value.errno) == (
        "ModelCacheUnwritable",
        False,
        code,
    )
    assert fix in info.value.message and os.strerror(code) in info.value.message
    left = [p.name for p in (tmp_path / "cache").iterdir()]
    assert all(name.endswith(".lock") for name in left), left


def test_resolve__other_os_errors_are_not_the_caches(tmp_path: Path) -> None:
    """A connection reset (an OSError too) while downloading says nothing of the cache."""

    class ResetStore(DirStore):
        def download(self, name: str, into: Path) -> str:
            raise ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")

    store = ResetStore(model_dir(tmp_path))
    with pytest.raises(ConnectionResetError):
        ModelCache(tmp_path / "cache", lambda url: store).resolve("s3://models/x/")


def test_probe_cache__fails_until_the_directory_can_be_made_and_written(tmp_path: Path) -> None:
    """A path under a regular file cannot be a directory, even for root: the probe fails with
    the kernel's ENOTDIR; once the file is gone it passes and leaves nothing behind."""
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    with pytest.raises(ModelCacheUnwritable) as info:
        probe_cache(blocker / "models")
    assert info.value.errno == errno.ENOTDIR and str(blocker / "models") in info.value.message
    blocker.unlink()
    probe_cache(blocker / "models")
    assert list((blocker / "models").iterdir()) == []


def test_resolve__logs_model_fetched_once_and_model_cached_in_the_other_processes(
    tmp_path: Path,
) -> None:
    store = DirStore(model_dir(tmp_path))
    first = ModelCache(tmp_path / "cache", lambda url: store)
    other = ModelCache(tmp_path / "cache", lambda url: store)  # another process on the node
    with capture_logs() as logs:
        for cache in (first, other, first, other):
            cache.resolve("s3://models/x/")
    events = [(e["event"], e["url"]) for e in logs if e["event"].startswith("model_")]
    assert events == [("model_fetched", "s3://models/x/"), ("model_cached", "s3://models/x/")]
    fetched = next(e for e in logs if e["event"] == "model_fetched")
    assert fetched["files"] == 2 and fetched["bytes"] == len(b"weights" * 100) + 2
