"""obstore against the real S3 server of the tests (SeaweedFS `weed mini`, recall_dev.objstore).

Each test states one fact the runtime's object-store code relies on: which call works, which
exception a refusal raises, what SeaweedFS honours. docs/results-store.md lists them with the
numbers measured here. The fault proxy and restarts are in test_objstore_faults.py.
"""

from __future__ import annotations

import datetime
import os
import socket
import threading
import urllib.error
import urllib.request
from pathlib import Path

import obstore
import pytest
from obstore.exceptions import (
    AlreadyExistsError,
    GenericError,
    NotSupportedError,
    PermissionDeniedError,
    PreconditionError,
)

from recall.base.settings import StoreSettings
from recall.bucket import StoreError, Stores
from recall.bucket.store import PART
from recall_dev import objstore_dev
from recall_dev.objstore import PORT_FLAGS, Credentials, ObjectStore
from tests.helpers import wait_for

pytestmark = pytest.mark.integration

NO_RETRY = {"max_retries": 0}


def listening_ports(pid: int) -> dict[int, str]:
    """The TCP ports process `pid` listens on, with the address each is bound to."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except FileNotFoundError:  # closed since the listing: a starting weed opens and closes
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out: dict[int, str] = {}
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            cols = line.split()
            local, state, inode = cols[1], cols[3], cols[9]
            if state == "0A" and inode in inodes:  # 0A: LISTEN
                addr, port = local.split(":")
                ip = ".".join(str(int(addr[i : i + 2], 16)) for i in (6, 4, 2, 0))
                out[int(port, 16)] = ip if table == "tcp" else f"[{addr}]"
    return out


def test_server__every_port_set_by_flag_and_bound_to_loopback(object_store: ObjectStore) -> None:
    proc = object_store.proc
    assert proc is not None
    # The admin's HTTP port opens last, about 0.5 s after S3 answers.
    wait_for(
        lambda: len(listening_ports(proc.pid)) >= len(PORT_FLAGS),
        timeout=10,
        message="weed to open all its ports",
    )
    ports = listening_ports(proc.pid)
    assert set(ports) == set(object_store.ports.values())  # ten, and no other
    assert set(ports.values()) == {"127.0.0.1"}


def test_put_get_list_delete(object_store: ObjectStore, bucket: str) -> None:
    store = object_store.s3_store(bucket)
    obstore.put(store, "jobs/a/chunk-0", b"zero")
    obstore.put(store, "jobs/a/chunk-1", b"one")
    obstore.put(store, "other", b"x")
    assert bytes(obstore.get(store, "jobs/a/chunk-1").bytes()) == b"one"
    listed = sorted(m["path"] for batch in obstore.list(store, prefix="jobs/") for m in batch)
    assert listed == ["jobs/a/chunk-0", "jobs/a/chunk-1"]
    obstore.delete(store, ["jobs/a/chunk-0", "jobs/a/chunk-1"])
    obstore.delete(store, "never-there")  # deleting a missing key is not an error
    assert [m["path"] for batch in obstore.list(store) for m in batch] == ["other"]
    with pytest.raises(FileNotFoundError, match="NoSuchKey"):
        obstore.get(store, "jobs/a/chunk-0")


def test_conditional_put__create_is_write_once(object_store: ObjectStore, bucket: str) -> None:
    store = object_store.s3_store(bucket)
    obstore.put(store, "result", b"first", mode="create")
    with pytest.raises(AlreadyExistsError, match="412 Precondition Failed"):
        obstore.put(store, "result", b"second", mode="create")
    assert bytes(obstore.get(store, "result").bytes()) == b"first"


def test_conditional_put__if_match_updates_only_the_version_read(
    object_store: ObjectStore, bucket: str
) -> None:
    store = object_store.s3_store(bucket)
    read = obstore.put(store, "index", b"v1")
    obstore.put(store, "index", b"v2", mode={"e_tag": read["e_tag"]})
    with pytest.raises(PreconditionError, match="412"):
        obstore.put(store, "index", b"v3", mode={"e_tag": read["e_tag"]})  # a stale etag
    assert bytes(obstore.get(store, "index").bytes()) == b"v2"


def create_race(object_store: ObjectStore, bucket: str, key: str, writers: int) -> list[int]:
    """`writers` threads put `key` with mode="create" at once; returns who won."""
    won: list[int] = []
    lost: list[int] = []
    start = threading.Barrier(writers)

    def write(i: int) -> None:
        store = object_store.s3_store(bucket)  # its own connections
        start.wait()
        try:
            obstore.put(store, key, f"writer-{i}".encode(), mode="create")
            won.append(i)
        except AlreadyExistsError:
            lost.append(i)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) + len(lost) == writers
    return won


def test_create_race__one_writer_of_eight_wins(object_store: ObjectStore, bucket: str) -> None:
    """seaweedfs#8800 (all concurrent `If-None-Match: *` PUTs succeeded) is fixed here."""
    for round_ in range(5):
        won = create_race(object_store, bucket, f"race-{round_}", writers=8)
        assert len(won) == 1
        body = obstore.get(object_store.s3_store(bucket), f"race-{round_}").bytes()
        assert bytes(body) == f"writer-{won[0]}".encode()


def test_copy__within_a_bucket(object_store: ObjectStore, bucket: str) -> None:
    store = object_store.s3_store(bucket)
    obstore.put(store, "src", b"payload")
    obstore.copy(store, "src", "dst")
    obstore.copy(store, "src", "dst")  # overwrite=True (the default) replaces
    assert bytes(obstore.get(store, "dst").bytes()) == b"payload"
    with pytest.raises(NotSupportedError, match="copy-if-not-exists"):
        obstore.copy(store, "src", "dst", overwrite=False)  # needs copy_if_not_exists


@pytest.mark.parametrize("mode", ["multipart", "header:If-None-Match:*"])
def test_copy_if_not_exists__works_with(object_store: ObjectStore, bucket: str, mode: str) -> None:
    store = object_store.s3_store(bucket, copy_if_not_exists=mode)
    obstore.put(store, "src", b"payload")
    obstore.copy(store, "src", "dst", overwrite=False)
    obstore.put(store, "src", b"changed")
    with pytest.raises(AlreadyExistsError):
        obstore.copy(store, "src", "dst", overwrite=False)
    assert bytes(obstore.get(store, "dst").bytes()) == b"payload"


def test_copy_if_not_exists__r2_header_is_ignored(object_store: ObjectStore, bucket: str) -> None:
    """Cloudflare's header means nothing to SeaweedFS: the copy silently overwrites."""
    mode = "header:cf-copy-destination-if-none-match:*"
    store = object_store.s3_store(bucket, copy_if_not_exists=mode)
    obstore.put(store, "src", b"new")
    obstore.put(store, "dst", b"old")
    obstore.copy(store, "src", "dst", overwrite=False)
    assert bytes(obstore.get(store, "dst").bytes()) == b"new"


def test_copy__across_buckets_is_a_server_side_copy_obstore_cannot_name(
    object_store: ObjectStore, bucket: str
) -> None:
    """An S3Store is one bucket, so obstore.copy stays within it; SeaweedFS itself copies
    across buckets (CopyObject with x-amz-copy-source), and honours If-None-Match on it."""
    other = f"{bucket}-out"
    object_store.create_bucket(other)
    try:
        obstore.put(object_store.s3_store(bucket), "result.json", b"{}")
        s3 = object_store.client()
        copy_source = {"x-amz-copy-source": f"/{bucket}/result.json"}
        assert s3.request("PUT", f"/{other}/talks/a.json", headers=copy_source).status == 200
        again = s3.request(
            "PUT", f"/{other}/talks/a.json", headers={**copy_source, "If-None-Match": "*"}
        )
        assert (again.status, again.error_code()) == (412, "PreconditionFailed")
        published = obstore.get(object_store.s3_store(other), "talks/a.json")
        assert bytes(published.bytes()) == b"{}"
    finally:
        object_store.delete_bucket(other)


def test_bucket__a_copy_across_buckets_and_a_file_put_go_in_parts(
    object_store: ObjectStore, bucket: str, store_env: dict[str, str], tmp_path: Path
) -> None:
    """What is too large to hold (a long redacted audio) travels as a multipart upload: three
    parts and a short one arrive whole, by `Bucket.put_file` and by `copy_to` between two
    buckets (two clients: not a server-side copy)."""
    other = f"{bucket}-out"
    object_store.create_bucket(other)
    try:
        stores = Stores(StoreSettings(url=f"s3://{bucket}/scratch"))
        results, outputs = stores.results(), stores.open(f"s3://{other}/calls")
        assert results.client is not outputs.client
        data = os.urandom(3 * PART + 4321)
        with open(tmp_path / "a.wav", "w+b") as file:
            file.write(data)
            results.put_file("a/redacted.wav", file)
        results.copy_to("a/redacted.wav", outputs, "call.redacted.wav")
        assert results.get("a/redacted.wav") == data
        assert outputs.get("call.redacted.wav") == data
        with pytest.raises(StoreError, match="the source is missing"):
            results.copy_to("never", outputs, "x.wav")
        assert outputs.get("x.wav") is None
    finally:
        object_store.delete_bucket(other)


def test_presigned_urls__get_and_put_with_urllib(object_store: ObjectStore, bucket: str) -> None:
    store = object_store.s3_store(bucket)
    obstore.put(store, "transcript.srt", b"1\n00:00:00,000 --> 00:00:01,000\nhi\n")
    url = obstore.sign(store, "GET", "transcript.srt", datetime.timedelta(minutes=5))
    assert url.startswith(f"{object_store.endpoint}/{bucket}/transcript.srt?X-Amz-Algorithm=")
    with urllib.request.urlopen(url, timeout=5) as resp:
        assert resp.read().endswith(b"hi\n")
    put_url = obstore.sign(store, "PUT", "upload", datetime.timedelta(minutes=5))
    req = urllib.request.Request(put_url, data=b"up", method="PUT")
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200
    assert bytes(obstore.get(store, "upload").bytes()) == b"up"
    with pytest.raises(urllib.error.HTTPError) as refused:  # the signature covers the key
        urllib.request.urlopen(url.replace("transcript.srt", "upload"), timeout=5)
    assert refused.value.code == 403


@pytest.mark.parametrize(
    ("access_key", "secret", "code"),
    [("admin", "wrong", "SignatureDoesNotMatch"), ("nobody", "wrong", "InvalidAccessKeyId")],
)
def test_wrong_credentials__permission_denied(
    object_store: ObjectStore, bucket: str, access_key: str, secret: str, code: str
) -> None:
    key = object_store.admin.access_key if access_key == "admin" else access_key
    store = object_store.s3_store(bucket, credentials=Credentials(key, secret))
    with pytest.raises(PermissionDeniedError, match=code):
        obstore.put(store, "x", b"1")
    with pytest.raises(PermissionDeniedError, match=code):
        obstore.get(store, "x")
    with pytest.raises(urllib.error.HTTPError) as anonymous:
        urllib.request.urlopen(f"{object_store.endpoint}/{bucket}/x", timeout=5)
    assert anonymous.value.code == 403


def test_missing_bucket__not_found_on_objects_generic_on_list(object_store: ObjectStore) -> None:
    store = object_store.s3_store("no-such-bucket", retry_config=NO_RETRY)
    with pytest.raises(FileNotFoundError, match="NoSuchBucket"):
        obstore.put(store, "x", b"1")  # no auto-creation, even for the admin
    with pytest.raises(FileNotFoundError, match="NoSuchBucket"):
        obstore.get(store, "x")
    with pytest.raises(GenericError, match="NoSuchBucket"):
        list(obstore.list(store))
    assert "no-such-bucket" not in object_store.client().list_buckets()


def test_worker_identity__only_the_scratch_prefix(object_store: ObjectStore, bucket: str) -> None:
    admin = object_store.s3_store(bucket)
    worker = object_store.s3_store(bucket, credentials=object_store.worker)
    obstore.put(admin, "out/published.srt", b"kept")
    obstore.put(worker, "scratch/j1/chunk-0", b"c0")
    obstore.copy(worker, "scratch/j1/chunk-0", "scratch/j1/chunk-0.bak")
    assert bytes(obstore.get(worker, "scratch/j1/chunk-0").bytes()) == b"c0"
    listed = [m["path"] for batch in obstore.list(worker, prefix="scratch/") for m in batch]
    assert sorted(listed) == ["scratch/j1/chunk-0", "scratch/j1/chunk-0.bak"]
    obstore.delete(worker, "scratch/j1/chunk-0.bak")
    with pytest.raises(PermissionDeniedError, match="AccessDenied"):
        obstore.put(worker, "out/x", b"1")
    with pytest.raises(PermissionDeniedError, match="AccessDenied"):
        obstore.get(worker, "out/published.srt")
    with pytest.raises(PermissionDeniedError, match="AccessDenied"):
        obstore.copy(worker, "scratch/j1/chunk-0", "out/x")
    with pytest.raises(GenericError, match="AccessDenied"):  # DeleteObjects, refused per key
        obstore.delete(worker, "out/published.srt")
    assert object_store.client(object_store.worker).request("PUT", "/new-bucket").status == 403
    assert bytes(obstore.get(admin, "out/published.srt").bytes()) == b"kept"


def test_sse_s3__passes_through_kms__refused(object_store: ObjectStore, bucket: str) -> None:
    sse = object_store.s3_store(bucket, server_side_encryption="AES256")
    obstore.put(sse, "enc", b"secret")
    head = object_store.client().request("HEAD", f"/{bucket}/enc")
    assert head.headers.get("X-Amz-Server-Side-Encryption") == "AES256"
    assert bytes(obstore.get(sse, "enc").bytes()) == b"secret"
    kms = object_store.s3_store(
        bucket, server_side_encryption="aws:kms", sse_kms_key_id="k1", retry_config=NO_RETRY
    )
    with pytest.raises(GenericError, match="500 Internal Server Error"):  # no KMS configured
        obstore.put(kms, "kms", b"secret")


def test_delete_bucket__removes_its_objects_first(object_store: ObjectStore) -> None:
    object_store.create_bucket("t-delete-me")
    object_store.create_bucket("t-delete-me")  # idempotent
    store = object_store.s3_store("t-delete-me")
    for i in range(3):
        obstore.put(store, f"k/{i}", b"x")
    assert object_store.delete_bucket("t-delete-me")
    assert "t-delete-me" not in object_store.client().list_buckets()
    assert not object_store.delete_bucket("t-delete-me")


def test_dev_up__reused_then_down_leaves_nothing(tmp_path: Path) -> None:
    workdir = tmp_path / "objstore"
    store = objstore_dev.dev_up(workdir, ("recall",), progress=lambda _m: None)
    try:
        again = objstore_dev.dev_up(workdir, ("recall", "extra"), progress=lambda _m: None)
        assert again.endpoint == store.endpoint and again.proc is not None
        assert store.proc is not None and again.proc.pid == store.proc.pid
        status = objstore_dev.dev_status(workdir)
        assert status["ready"] is True
        assert sorted(again.client().list_buckets()) == ["extra", "recall"]
        assert again.env()["AWS_ENDPOINT_URL"] == store.endpoint
    finally:
        assert objstore_dev.dev_down(workdir)
    assert not store.proc.alive()
    assert not workdir.exists()
    assert not list(Path("/tmp").glob(f"seaweedfs-*-grpc-{store.ports['s3.port.grpc']}.sock"))


def test_start__a_port_taken_before_weed_binds_it__starts_on_new_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from recall_dev import objstore as objstore_module
    from recall_dev.cluster import free_ports

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        choices: list[list[int]] = []

        def s3_port_taken_first(n: int) -> list[int]:
            ports = free_ports(n)
            if not choices:
                ports[PORT_FLAGS.index("s3.port")] = busy
            choices.append(ports)
            return ports

        monkeypatch.setattr(objstore_module, "free_ports", s3_port_taken_first)
        said: list[str] = []
        store = ObjectStore(workdir=tmp_path / "store", buckets=("port-test",))
        store.start(progress=said.append)
        try:
            assert len(choices) == 2, choices
            assert store.s3_port == choices[1][PORT_FLAGS.index("s3.port")] != busy
            assert len(set(store.ports.values())) == len(PORT_FLAGS)
            assert any("starting again on new ports" in line for line in said), said
            assert store.has_bucket("port-test")
        finally:
            store.stop()
    assert store.proc is None


def test_reserve_ports__held_refused_until_start_then_weed_binds_them(tmp_path: Path) -> None:
    store = ObjectStore(workdir=tmp_path / "store")
    store.reserve_ports()
    try:
        ports = dict(store.ports)
        assert len(set(ports.values())) == len(PORT_FLAGS)
        for port in ports.values():
            with socket.socket() as other, pytest.raises(OSError, match="in use"):
                other.bind(("127.0.0.1", port))  # nobody else can take it
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", ports["s3.port"]), timeout=5).close()
        store.start()
        assert store.ports == ports
        proc = store.proc
        assert proc is not None
        wait_for(
            lambda: set(listening_ports(proc.pid)) == set(ports.values()),
            timeout=10,
            message=lambda: f"weed to listen on {ports}: {listening_ports(proc.pid)}",
        )
    finally:
        store.stop()
