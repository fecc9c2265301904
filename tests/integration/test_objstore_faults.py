"""The object store's faults as obstore sees them: slow, lost answers, down, killed and restarted.

The store is the real SeaweedFS of the session, behind `recall_dev.objstore_faults.FaultProxy`
(the first tests) or killed in place (the last). Each test states what obstore does by itself
(retries or not, which exception, how long), which is what the runtime's retry and
settle-by-reading code must add to. docs/results-store.md lists the numbers.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Iterator
from typing import Any

import obstore
import pytest
from obstore.exceptions import AlreadyExistsError, GenericError

from recall_dev.objstore import ObjectStore
from recall_dev.objstore_faults import FaultProxy

pytestmark = pytest.mark.integration

ms = datetime.timedelta(milliseconds=1)
# Backoff that outlasts a restart of weed (~4 s, more on a busy machine): bounded by time,
# not by a count. obstore's backoff is decorrelated jitter, which drifts back towards its
# initial 100 ms, so 20 retries took as little as 3.6 s; its default (10 retries) gives up in
# 1.5–3 s on an idle machine.
PATIENT = {
    "max_retries": 1000,
    "backoff": {"init_backoff": 100 * ms, "max_backoff": 1000 * ms, "base": 2},
    "retry_timeout": datetime.timedelta(seconds=60),
}


@pytest.fixture
def proxy(object_store: ObjectStore) -> Iterator[FaultProxy]:
    with FaultProxy(object_store.s3_port) as p:
        yield p


def via(proxy: FaultProxy, store: ObjectStore, bucket: str, **kwargs: Any) -> Any:
    return store.s3_store(bucket, endpoint=proxy.endpoint, **kwargs)


def timed(call: Any) -> tuple[float, Any]:
    start = time.monotonic()
    try:
        result = call()
    except Exception as e:
        result = e
    return time.monotonic() - start, result


def test_proxy__passes_signed_requests_and_presigned_urls(
    object_store: ObjectStore, bucket: str, proxy: FaultProxy
) -> None:
    store = via(proxy, object_store, bucket)
    obstore.put(store, "k", b"v")
    assert bytes(obstore.get(store, "k").bytes()) == b"v"
    assert proxy.stats.forwarded["PUT"] == 1 and proxy.stats.forwarded["GET"] == 1


def test_slow_store__within_the_timeout_only_slower(
    object_store: ObjectStore, bucket: str, proxy: FaultProxy
) -> None:
    store = via(proxy, object_store, bucket)
    obstore.put(store, "k", b"v")
    proxy.delay(1.0)
    took, body = timed(lambda: bytes(obstore.get(store, "k").bytes()))
    # slower by the delay, and answered within obstore's 30 s timeout (not timed out, retried)
    assert body == b"v" and 1.0 <= took < 25.0


def test_slow_store__past_the_timeout_retried_then_generic_error(
    object_store: ObjectStore, bucket: str, proxy: FaultProxy
) -> None:
    """Timeouts are retried, PUTs included (each retry re-sends the PUT, which lands)."""
    store = via(
        proxy, object_store, bucket, client_options={"timeout": "500ms"},
        retry_config={"max_retries": 2},
    )  # fmt: skip
    proxy.delay(1.0)
    took, error = timed(lambda: obstore.put(store, "slow", b"v"))
    assert isinstance(error, GenericError) and "after 2 retries" in str(error)
    assert 1.5 <= took < 15.0  # three attempts of 500 ms, and no more (the error says so)
    proxy.heal()
    time.sleep(1.2)  # the held PUTs reach the store after the client gave up
    assert proxy.stats.forwarded["PUT"] == 3
    assert bytes(obstore.get(object_store.s3_store(bucket), "slow").bytes()) == b"v"


def test_lost_put_answer__plain_put_retried_transparently(
    object_store: ObjectStore, bucket: str, proxy: FaultProxy
) -> None:
    proxy.lose_answers({"PUT"}, count=1)
    obstore.put(via(proxy, object_store, bucket), "k", b"v")
    assert (proxy.stats.lost["PUT"], proxy.stats.forwarded["PUT"]) == (1, 2)


@pytest.mark.parametrize("how", ["reset", "hang"])
def test_lost_put_answer__create_put_not_retried_yet_written(
    object_store: ObjectStore, bucket: str, proxy: FaultProxy, how: str
) -> None:
    """A conditional PUT is not idempotent for obstore: one attempt, a GenericError, and the
    object is there. The caller settles it by reading back (its own bytes or etag)."""
    store = via(proxy, object_store, bucket, client_options={"timeout": "1s"})
    proxy.lose_answers({"PUT"}, how="reset" if how == "reset" else "hang", count=1)
    took, error = timed(lambda: obstore.put(store, "result", b"mine", mode="create"))
    assert isinstance(error, GenericError) and "error sending request" in str(error)
    assert took < 10.0  # no retry: one attempt reached the store (an idle machine: < 0.5 s,
    assert proxy.stats.forwarded["PUT"] == 1  # and < 1.5 s when the answer hangs for 1 s)
    assert bytes(obstore.get(object_store.s3_store(bucket), "result").bytes()) == b"mine"
    with pytest.raises(AlreadyExistsError):  # retrying it by hand now looks like a conflict
        obstore.put(object_store.s3_store(bucket), "result", b"mine", mode="create")


def test_lost_copy_answer__if_not_exists_retry_reports_a_false_conflict(
    object_store: ObjectStore, bucket: str, proxy: FaultProxy
) -> None:
    """With copy_if_not_exists="header:If-None-Match:*" obstore retries the copy after a lost
    answer, and the retry meets the copy's own result: AlreadyExistsError."""
    store = via(proxy, object_store, bucket, copy_if_not_exists="header:If-None-Match:*")
    obstore.put(store, "src", b"v")
    proxy.lose_answers({"PUT"}, count=1)
    with pytest.raises(AlreadyExistsError):
        obstore.copy(store, "src", "dst", overwrite=False)
    assert bytes(obstore.get(object_store.s3_store(bucket), "dst").bytes()) == b"v"


def test_lost_get_answer__retried_transparently(
    object_store: ObjectStore, bucket: str, proxy: FaultProxy
) -> None:
    store = via(proxy, object_store, bucket)
    obstore.put(store, "k", b"v")
    proxy.lose_answers({"GET"}, count=1)
    assert bytes(obstore.get(store, "k").bytes()) == b"v"
    assert proxy.stats.lost["GET"] == 1


def test_store_down__refused_retried_briefly_then_generic_error(
    object_store: ObjectStore, bucket: str, proxy: FaultProxy
) -> None:
    proxy.down()
    took, error = timed(lambda: obstore.put(via(proxy, object_store, bucket), "k", b"v"))
    assert isinstance(error, GenericError) and "after 10 retries" in str(error)
    # obstore's default backoff: 10 retries in about 1.5–3 s when idle (13.9 s seen beside
    # other tests); the bound catches a wait for its 3-minute retry_timeout instead.
    assert took < 60.0
    took, error = timed(
        lambda: obstore.put(via(proxy, object_store, bucket, retry_config={"max_retries": 0}),
                            "k", b"v")
    )  # fmt: skip
    assert isinstance(error, GenericError) and took < 0.5


def test_store_down__a_patient_backoff_rides_over_an_outage(
    object_store: ObjectStore, bucket: str, proxy: FaultProxy
) -> None:
    proxy.down()
    threading.Timer(3.0, proxy.up).start()
    took, meta = timed(
        lambda: obstore.put(via(proxy, object_store, bucket, retry_config=PATIENT), "k", b"v")
    )
    assert isinstance(meta, dict) and "e_tag" in meta and took >= 3.0


@pytest.mark.slow
def test_killed_and_restarted__same_endpoint_same_objects(
    object_store: ObjectStore, bucket: str
) -> None:
    store = object_store.s3_store(bucket, retry_config=PATIENT)
    obstore.put(store, "before", b"kept")
    endpoint = object_store.endpoint
    outcome: dict[str, Any] = {}
    object_store.kill()  # SIGKILL: no goodbye

    def write_while_down() -> None:
        outcome["took"], outcome["result"] = timed(lambda: obstore.put(store, "during", b"d"))

    writer = threading.Thread(target=write_while_down)
    writer.start()
    object_store.restart()  # this thread lives as long as the session's store
    assert object_store.endpoint == endpoint
    assert 2.0 < object_store.ready_seconds < 30.0
    assert bytes(obstore.get(store, "before").bytes()) == b"kept"  # reads at once
    assert not object_store.writable()  # the master warms up: PUTs wait inside weed
    object_store.wait_writable()
    writer.join()
    # obstore retried the refused connections until weed listened, then weed held the PUT
    # until its master had warmed up (15 s after it started), within PATIENT's 60 s.
    assert isinstance(outcome["result"], dict), outcome
    assert outcome["took"] > 8.0
    assert bytes(obstore.get(store, "during").bytes()) == b"d"
