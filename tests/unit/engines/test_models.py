"""The model cache on a local store: manifests, digests, the lock, atomic copies, failures."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest

from recall.engines.models import MANIFEST, ModelCache, ModelStoreMissing, manifest, parse_manifest
from recall.resources.errors import JobFailure


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
