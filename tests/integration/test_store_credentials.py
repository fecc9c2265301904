"""Store credentials against the real S3 server: a mounted Secret rotated under a running client
is picked up, and server-side encryption settings pass through from the environment."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from recall.base.settings import StoreSettings
from recall.bucket import StoreAccessDenied, Stores
from recall_dev.objstore import ObjectStore
from tests.helpers import wait_for


def test_a_rotated_secret_is_read_again_without_a_restart(
    object_store: ObjectStore, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in object_store.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "AWS_ACCESS_KEY_ID").write_text(object_store.worker.access_key)
    (secret / "AWS_SECRET_ACCESS_KEY").write_text("revoked-secret")
    settings = StoreSettings(
        url=f"s3://{bucket}/", credentials_dir=secret, credentials_refresh_seconds=1
    )
    results = Stores(settings).results()
    with pytest.raises(StoreAccessDenied):
        results.put("scratch/probe", b"1")
    # The Secret is rotated (kubelet swaps the files in place); the same client picks it up.
    (secret / "AWS_SECRET_ACCESS_KEY").write_text(object_store.worker.secret_key)
    started = time.monotonic()

    def works() -> bool:
        try:
            results.put("scratch/probe", b"1", once=False)
            return True
        except StoreAccessDenied:
            return False

    wait_for(works, timeout=15, interval=0.5, message="the rotated key to be used")
    assert time.monotonic() - started < 10
    # The worker's identity reaches scratch/ only, whatever the file says.
    with pytest.raises(StoreAccessDenied):
        results.put("index/x", b"1")


def test_server_side_encryption_passes_through_from_the_environment(
    object_store: ObjectStore, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in object_store.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_SERVER_SIDE_ENCRYPTION", "AES256")
    results = Stores(StoreSettings(url=f"s3://{bucket}/")).results()
    results.put("scratch/encrypted", b"secret words")
    head = object_store.client().request("HEAD", f"/{bucket}/scratch/encrypted")
    assert head.status == 200
    assert head.headers.get("X-Amz-Server-Side-Encryption") == "AES256"
    assert os.environ["AWS_SERVER_SIDE_ENCRYPTION"] == "AES256"
