"""Sources in buckets: an object streamed into a temporary file, each store failure answered as
the job records it."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from recall.base.settings import StoreSettings
from recall.bucket import (
    Bucket,
    StoreAccessDenied,
    StoreBucketMissing,
    StoreError,
    StoreObjectMissing,
    Stores,
    StoreUnavailable,
)
from recall.resources.errors import JobFailure
from recall.worker.sources import object_reader


def test_object_reader__streams_the_object_into_a_temporary_file_with_its_digest(
    tmp_path: Path,
) -> None:
    stores = Stores(StoreSettings(url="memory://media"))
    stores.open("memory://media/in").put("talk.wav", b"RIFF and more")
    path, digest = object_reader(stores)("memory://media/in/talk.wav", tmp_path, 100)
    assert path.parent == tmp_path
    assert path.name.startswith("recall-source-") and path.suffix == ".wav"
    assert path.read_bytes() == b"RIFF and more"
    assert digest == hashlib.sha256(b"RIFF and more").hexdigest()


def test_object_reader__a_missing_object_is_source_not_found_permanently(tmp_path: Path) -> None:
    stores = Stores(StoreSettings(url="memory://media"))
    with pytest.raises(JobFailure) as failed:
        object_reader(stores)("memory://media/in/gone.wav", tmp_path, 100)
    assert failed.value.reason == "SourceNotFound"
    assert failed.value.permanent
    assert failed.value.message == "memory://media/in/gone.wav: no such object"
    assert list(tmp_path.iterdir()) == []


def test_object_reader__an_object_over_the_limit_is_refused_before_reading(
    tmp_path: Path,
) -> None:
    stores = Stores(StoreSettings(url="memory://media"))
    stores.open("memory://media/in").put("long.wav", b"x" * 11)
    with pytest.raises(JobFailure) as failed:
        object_reader(stores)("memory://media/in/long.wav", tmp_path, 10)
    assert failed.value.reason == "SourceTooLarge"
    assert failed.value.permanent
    assert failed.value.message == "memory://media/in/long.wav: 11 bytes, the limit is 10"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("error", "reason", "permanent"),
    [
        (StoreObjectMissing("gone"), "SourceNotFound", True),
        (StoreBucketMissing("gone"), "SourceNotFound", True),
        (StoreAccessDenied("denied"), "SourceAccessDenied", True),
        (StoreUnavailable("down"), "SourceUnavailable", False),
        (StoreError("odd"), "SourceRejected", True),
    ],
)
def test_object_reader__a_store_error_is_answered_as_the_job_records_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    error: StoreError,
    reason: str,
    permanent: bool,
) -> None:
    def stream(bucket: Bucket, key: str, chunk: int = 1 << 20) -> Iterator[bytes]:
        yield b"RIFF"  # a block is written before the store fails
        raise error

    monkeypatch.setattr(Bucket, "stream", stream)
    stores = Stores(StoreSettings(url="memory://media"))
    stores.open("memory://media/in").put("talk.wav", b"RIFF and more")
    with pytest.raises(JobFailure) as failed:
        object_reader(stores)("memory://media/in/talk.wav", tmp_path, 100)
    assert (failed.value.reason, failed.value.permanent) == (reason, permanent)
    assert failed.value.message == f"memory://media/in/talk.wav: {error.message}"
    assert failed.value.__cause__ is None and failed.value.__suppress_context__
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "key",
    [
        "talks/day#2/keynote.wav",
        "talks/what?/keynote.wav",
        "talks/50%/a.wav",
        "talks/%41/a.wav",
        "talks/my talk.wav",
        "talks/a+b.wav",
        "talks/café/ünï.wav",
    ],
)
def test_object_reader__reads_the_object_its_listed_url_names(tmp_path: Path, key: str) -> None:
    """The URL `recall submit` lists (`Bucket.url_of`) names that object and no other, even
    beside the key its special characters would be cut or decoded to."""
    stores = Stores(StoreSettings(url="memory://media"))
    bucket = stores.open("memory://media")
    for other in ("talks/day/keynote.wav", "talks/50/a.wav", "talks/A/a.wav", "talks/my"):
        bucket.put(other, b"another object")
    bucket.put(key, key.encode())
    path, _ = object_reader(stores)(bucket.url_of(key), tmp_path, 100)
    assert path.read_bytes() == key.encode()
    assert path.suffix == ".wav"
    path.unlink()


def test_object_reader__a_raw_fragment_or_query_reads_the_object_it_names(
    tmp_path: Path,
) -> None:
    """A URL stored before keys were encoded names its key raw: that object, not another."""
    stores = Stores(StoreSettings(url="memory://media"))
    bucket = stores.open("memory://media")
    bucket.put("talks/day", b"another object")
    for key in ("talks/day#2/keynote.wav", "talks/what?.wav"):
        bucket.put(key, key.encode())
        path, _ = object_reader(stores)(f"memory://media/{key}", tmp_path, 100)
        assert path.read_bytes() == key.encode()
        path.unlink()


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("memory://media/talks/my%20talk.wav", "talks/my talk.wav"),
        ("memory://media/talks/day%232/keynote.wav", "talks/day#2/keynote.wav"),
        ("memory://media/talks/50%25/a.wav", "talks/50%/a.wav"),
        ("memory://media/talks/caf%C3%A9.wav", "talks/café.wav"),
    ],
)
def test_object_reader__decodes_the_whole_key_of_a_percent_encoded_url(
    tmp_path: Path, url: str, key: str
) -> None:
    stores = Stores(StoreSettings(url="memory://media"))
    stores.open("memory://media").put(key, b"the one")
    path, _ = object_reader(stores)(url, tmp_path, 100)
    assert path.read_bytes() == b"the one"
    path.unlink()
