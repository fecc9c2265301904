"""Buckets from URLs: parsing, write-once semantics, typed errors, credentials from files."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest

from recall.base.settings import StoreSettings
from recall.bucket import Location, StoreConflict, Stores, StoreUrlInvalid
from recall.bucket.errors import classify
from recall.bucket.store import PART, FileCredentials, allow_http
from recall_dev.twin.clock import EPOCH, FakeClock


@pytest.mark.parametrize(
    ("url", "scheme", "bucket", "prefix"),
    [
        ("s3://media/talks/", "s3", "media", "talks"),
        ("gs://b", "gs", "b", ""),
        ("az://container/a/b", "az", "container", "a/b"),
        ("file:///var/results", "file", "", "var/results"),
        ("memory://t", "memory", "t", ""),
    ],
)
def test_location__parses_every_scheme(url: str, scheme: str, bucket: str, prefix: str) -> None:
    loc = Location.parse(url)
    assert (loc.scheme, loc.bucket, loc.prefix) == (scheme, bucket, prefix)


@pytest.mark.parametrize("url", ["ftp://x/y", "s3:///no-bucket", "file://host/p", "results"])
def test_location__refuses_what_no_store_can_be_opened_from(url: str) -> None:
    with pytest.raises(StoreUrlInvalid) as e:
        Location.parse(url)
    assert e.value.reason == "StorageUrlInvalid"


SPECIAL_KEYS = [
    "talks/my talk.wav",
    "talks/day#2/keynote.wav",
    "talks/what?.wav",
    "talks/50%/a.wav",
    "talks/%41.wav",
    "talks/a+b.wav",
    "talks/café/ünï 🎙.wav",
    "talks/tab\there.wav",
]


@pytest.mark.parametrize("key", SPECIAL_KEYS)
@pytest.mark.parametrize("base", ["s3://media/in", "gs://media", "file:///srv/media", "memory://m"])
def test_location__a_key_round_trips_through_its_url(base: str, key: str) -> None:
    loc = Location.parse(base)
    url = loc.url(key)
    assert not any(c.isspace() or c in "#?" for c in url)  # what the CRD's URL patterns allow
    assert url.isascii()
    parsed = Location.parse(url)
    assert (parsed.scheme, parsed.bucket) == (loc.scheme, loc.bucket)
    assert parsed.prefix == "/".join(p for p in (loc.prefix, key) if p)
    folder, name = parsed.split()
    assert folder.url(name) == url


@pytest.mark.parametrize(
    "key",
    [
        "scratch/ns/job-1/0b0e-uid/a2-0123456789abcdef0123456789abcdef/out.srt",
        "index/ns/batch/uid/item_1.json",
        "a:b@c+d=e,f;g!h$i&j'k(l)m*n~o.p_q-r/x.wav",
        "talks/{key}",  # an output's placeholder, filled in after the URL is written
    ],
)
def test_location__a_plain_key_s_url_is_the_key_as_it_was(key: str) -> None:
    assert Location.parse("s3://media/in").url(key) == f"s3://media/in/{key}"
    assert Location.parse("file:///srv").url(key) == f"file:///srv/{key}"


@pytest.mark.parametrize(
    ("url", "key"),
    [("s3://media/talks/day#2/a.wav", "talks/day#2/a.wav"), ("s3://media/a.wav?x=1", "a.wav?x=1")],
)
def test_location__a_raw_query_or_fragment_is_part_of_the_key(url: str, key: str) -> None:
    """As `recall submit` wrote URLs before keys were encoded: never a shorter key."""
    assert Location.parse(url).prefix == key


def test_location__file_colon_one_slash_is_a_file_url() -> None:
    assert Location.parse("file:/srv/results") == Location.parse("file:///srv/results")


def test_settings__refuse_an_unknown_scheme_with_the_ones_that_work() -> None:
    with pytest.raises(ValueError, match=r"s3://, gs://, az:// or file://"):
        StoreSettings(url="ftp://example.org/x")


def test_put__once_accepts_the_same_bytes_again_and_refuses_others() -> None:
    bucket = Stores(StoreSettings(url="memory://t/pre")).results()
    bucket.put("a/b.json", b"one")
    bucket.put("a/b.json", b"one")  # a repeat after a lost answer
    with pytest.raises(StoreConflict):
        bucket.put("a/b.json", b"two")
    bucket.put("a/b.json", b"two", once=False)
    assert bucket.get("a/b.json") == b"two"
    assert bucket.get("missing") is None
    assert [o.key for o in bucket.list("a/")] == ["a/b.json"]
    assert bucket.url_of("a/b.json") == "memory://t/pre/a/b.json"


def test_copy_to__within_one_store_and_across_stores() -> None:
    stores = Stores(StoreSettings(url="memory://t"))
    src, same, other = stores.results(), stores.open("memory://t/out"), stores.open("memory://u")
    src.put("x", b"data")
    src.copy_to("x", same, "y")  # server-side: the same client
    src.copy_to("x", other, "z")  # streamed
    assert same.get("y") == b"data" and other.get("z") == b"data"
    assert src.get("out/y") == b"data"  # `same` is the prefix out/ of the same bucket


def test_put_file__sends_the_file_from_its_start_in_parts(tmp_path: Path) -> None:
    bucket = Stores(StoreSettings(url=(tmp_path / "results").as_uri())).results()
    data = np.random.default_rng(3).bytes(3 * PART + 17)  # four parts, the last a short one
    with tempfile.TemporaryFile() as file:
        file.write(data)  # left at its end: put_file starts from the beginning
        bucket.put_file("a/redacted.wav", file)
        bucket.put_file("a/redacted.wav", file)  # a retry overwrites with the same bytes
    assert bucket.get("a/redacted.wav") == data


def test_copy_to__across_stores_streams_with_bounded_memory(tmp_path: Path) -> None:
    """256 MiB copied between two stores (two clients, so not server-side) in a process of its
    own: its peak resident memory grows by a few parts, not by the object."""
    script = textwrap.dedent(
        f"""
        import os, resource
        from obstore.store import LocalStore
        from recall.base.settings import StoreSettings
        from recall.bucket import Location, Stores
        from recall.bucket.store import Bucket

        root = {str(tmp_path)!r}
        os.makedirs(root + "/src")
        with open(root + "/src/big.wav", "wb") as f:
            f.truncate(256 << 20)
        stores = Stores(StoreSettings(url="file://" + root + "/src"))
        dst = Location.parse("file://" + root + "/dst")
        other = Bucket(stores, LocalStore("/", mkdir=True), dst)
        assert other.client is not stores.results().client
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        stores.results().copy_to("big.wav", other, "copy.wav")
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        print(grown // 1024, os.path.getsize(root + "/dst/copy.wav"))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300
    ).stdout.split()
    grown_mib, size = int(out[-2]), int(out[-1])
    assert size == 256 << 20
    assert grown_mib < 96, f"copying 256 MiB grew the process by {grown_mib} MiB"


def test_delete__missing_keys_are_fine_and_batches_are_split() -> None:
    bucket = Stores(StoreSettings(url="memory://t")).results()
    for i in range(3):
        bucket.put(f"k{i}", b"x")
    assert bucket.delete(["k0", "k1", "k2", "never"]) == 4
    assert list(bucket.list()) == []


def test_classify__a_missing_key_is_not_a_missing_bucket() -> None:
    bucket = Stores(StoreSettings(url="memory://t")).results()
    import obstore

    with pytest.raises(FileNotFoundError) as missing:
        obstore.get(bucket.client, "nope")
    assert classify(missing.value, "get").reason == "StorageObjectMissing"
    bucket_missing = FileNotFoundError("404 Not Found: <Code>NoSuchBucket</Code>")
    assert classify(bucket_missing, "put").reason == "StorageBucketMissing"
    assert classify(TimeoutError("read timed out"), "put", write=True).maybe_applied


def test_file_credentials__are_read_again_after_a_rotation(tmp_path: Path) -> None:
    (tmp_path / "AWS_ACCESS_KEY_ID").write_text("old\n")
    (tmp_path / "AWS_SECRET_ACCESS_KEY").write_text("s1")
    provider = FileCredentials(tmp_path, clock=FakeClock())
    first = provider()
    assert (first["access_key_id"], first["secret_access_key"], first["token"]) == (
        "old",
        "s1",
        None,
    )
    assert first["expires_at"] == EPOCH + dt.timedelta(seconds=60)  # a minute on its clock
    (tmp_path / "AWS_ACCESS_KEY_ID").write_text("new")  # the Secret was rotated
    assert provider()["access_key_id"] == "new"


def test_allow_http__follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ALLOW_HTTP", raising=False)
    assert not allow_http()
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    assert allow_http()
