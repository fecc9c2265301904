"""A results store that refuses, against the real S3 server: a clear answer, nothing lost.

- Wrong credentials or a missing bucket: the first job a worker claims fails at its first
  write, before any engine call, with the store's reason (`StorageAccessDenied`,
  `StorageBucketMissing`); the worker then claims nothing more until a probe write succeeds,
  so the rest of the queue waits instead of failing; the Batch says `StorageFailing`.
- A URL no store can be opened from: the worker and the operator refuse to start, saying why.
- The operator's readiness says when it cannot reach the store.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from recall.bucket import Bucket
from recall.kube.client import KubeClient as Kube
from recall.resources import Phase, is_true
from recall_dev.cluster import free_port
from recall_dev.objstore import ObjectStore
from tests.helpers import ControllerThread, Procs, get_job, manifest, read_jsonl, readyz, wait_for


def batch(name: str, keys: list[str]) -> dict[str, object]:
    items = [{"key": k, "source": {"url": f"file:///media/{k}.wav"}} for k in keys]
    defaults = {
        "leaseDurationSeconds": 5,
        "engine": {"name": "simulated", "simulate": {"chunks": 2}},
    }
    return manifest("Batch", name, {"items": items, "defaults": defaults})


@pytest.mark.parametrize("fault", ["credentials", "bucket"])
def test_a_refusing_store_fails_one_job_per_worker_with_the_reason_and_the_batch_says_so(
    kube: Kube,
    namespace: str,
    procs: Procs,
    results: Bucket,
    object_store: ObjectStore,
    tmp_path: Path,
    fault: str,
) -> None:
    env = {"RECALL_WORKER_SIMULATED_RECORD": str(tmp_path / "chunks.jsonl")}
    if fault == "credentials":
        env["AWS_SECRET_ACCESS_KEY"] = "not-the-secret"
        reason = "StorageAccessDenied"
    else:
        env["RECALL_STORE_URL"] = "s3://no-such-bucket-here/"
        reason = "StorageBucketMissing"
    kube.create_batch(namespace, batch("b", ["a", "b", "c"]))
    with ControllerThread(kube, namespace, results):
        procs.worker("w", "--engine", "simulated", "--namespace", namespace, env=env)

        def failed() -> list[str]:
            jobs = [kube.get_job(namespace, f"b-{k}") for k in "abc"]
            return [j.name for j in jobs if j is not None and j.status.phase == Phase.FAILED]

        wait_for(failed, timeout=30, message=procs.dump)

        def condition() -> bool:
            found = kube.get_batch(namespace, "b")
            return found is not None and is_true(found.status.conditions, "StorageFailing")

        wait_for(condition, timeout=20, message="the Batch's StorageFailing condition")
        found = kube.get_batch(namespace, "b")
        assert found is not None
        cond = next(c for c in found.status.conditions if c.type == "StorageFailing")
        assert cond.reason == reason
    (name,) = failed()  # one job failed; the other two wait for a store that answers
    job = get_job(kube, namespace, name)
    error = job.status.last_error
    assert error is not None and (error.reason, error.permanent) == (reason, True)
    assert "to store the cutting" in (error.message or "")
    assert job.status.attempts == 1
    others = [get_job(kube, namespace, f"b-{k}") for k in "abc" if f"b-{k}" != name]
    assert all(j.status.phase == Phase.QUEUED and j.status.attempts == 0 for j in others)
    assert read_jsonl(tmp_path / "chunks.jsonl") == []  # no engine call was paid for


def test_a_url_no_store_can_be_opened_from_stops_the_worker_and_the_operator_at_start(
    namespace: str, procs: Procs
) -> None:
    env = {"RECALL_STORE_URL": "ftp://example.org/results"}
    worker = procs.worker("w", "--engine", "simulated", "--namespace", namespace, env=env)
    operator = procs.recall("op", "operator", "--namespace", namespace, env=env)
    assert worker.wait(timeout=30) != 0
    assert operator.wait(timeout=30) != 0
    for proc in (worker, operator):
        text = proc.log.read_text()
        assert "unsupported store URL" in text and "s3://" in text, text[-2000:]


@pytest.mark.parametrize("reachable", [True, False])
def test_the_operators_readiness_says_whether_it_can_reach_the_store(
    namespace: str, procs: Procs, reachable: bool
) -> None:
    port = free_port()
    env = {"RECALL_OPERATOR_HEALTH_PORT": str(port)}
    if not reachable:
        env["AWS_SECRET_ACCESS_KEY"] = "not-the-secret"
    procs.recall("op", "operator", "--namespace", namespace, env=env)
    expected = 200 if reachable else 503
    _, body = wait_for(
        lambda: (s := readyz(port))[0] == expected and s,
        timeout=40,
        message=lambda: f"/readyz to answer {expected}: {readyz(port)}\n{procs.dump()}",
    )
    if not reachable:
        assert "StorageAccessDenied" in body
