"""A ResourceQuota on ConfigMaps refuses a transcript shard: the job fails for good, at once,
with the API server's reason, and the engine is not paid again.

The local control plane runs no quota controller, so the test writes the quota's status
itself (hard and used); the API server's quota admission then counts each new ConfigMap and
answers 403 "exceeded quota" once the limit is reached.
"""

from __future__ import annotations

from pathlib import Path

from kubernetes import client

from recall.kube.store import KubeStore as Kube
from recall.resources import Phase
from recall.transcripts import job_selector, manifest_name
from tests.helpers import Procs, create_job, get_job, read_jsonl, wait_for


def limit_config_maps(kube: Kube, namespace: str, more: int) -> None:
    """Allow `more` ConfigMaps beyond those the namespace holds now."""
    used = len(kube.core.list_namespaced_config_map(namespace).items)
    hard = {"configmaps": str(used + more)}
    kube.core.create_namespaced_resource_quota(
        namespace,
        client.V1ResourceQuota(
            metadata=client.V1ObjectMeta(name="transcripts"),
            spec=client.V1ResourceQuotaSpec(hard=hard),
        ),
    )
    kube.core.patch_namespaced_resource_quota_status(
        "transcripts", namespace, {"status": {"hard": hard, "used": {"configmaps": str(used)}}}
    )


def test_quota__a_refused_shard_fails_the_job_once_with_the_reason(
    kube: Kube, namespace: str, procs: Procs, tmp_path: Path
) -> None:
    limit_config_maps(kube, namespace, more=1)  # the manifest fits, the first shard does not
    create_job(kube, namespace, "q", simulate={"chunks": 4, "chunkDelaySeconds": 0})
    record = tmp_path / "chunks.jsonl"
    worker = procs.worker(
        "w",
        "--engine",
        "simulated",
        "--namespace",
        namespace,
        "--max-jobs",
        "1",
        env={"RECALL_WORKER_SIMULATED_RECORD": str(record)},
    )
    wait_for(
        lambda: get_job(kube, namespace, "q").status.phase == Phase.FAILED,
        timeout=60,
        message=procs.dump,
    )
    assert worker.wait(timeout=30) == 0
    job = get_job(kube, namespace, "q")
    error = job.status.last_error
    assert error is not None and (error.reason, error.permanent) == ("TranscriptRefused", True)
    message = error.message or ""
    assert "to store chunk 0" in message
    assert "forbidden: exceeded quota: transcripts" in message
    assert "not retried" in message
    assert job.status.attempts == 1
    # The engine ran once for the chunk whose shard was refused, and never again.
    assert [(r["attempt"], r["chunk"]) for r in read_jsonl(record)] == [(1, 0)]
    names = {cm.name for cm in kube.list_config_maps(namespace, job_selector("q"))}
    assert names == {manifest_name("q", 1)}
