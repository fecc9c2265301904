"""`unreferenced`: which of a job's transcript ConfigMaps nothing accepted references, for
every phase, and never one that a result or a checkpoint references."""

from __future__ import annotations

from typing import Any

import pytest

from recall.kube import ConfigMapData
from recall.media.types import Cutting
from recall.resources import TranscriptionJob
from recall.transcripts import (
    LABEL_ATTEMPT,
    LABEL_JOB_UID,
    LABEL_KIND,
    Manifest,
    ShardRef,
    unreferenced,
)

UID = "0b5c6c6e-1111-4a4a-9c9c-000000000001"
CUTTING = Cutting(chunk_seconds=30.0, snap_seconds=2.0, rate=16_000, source="file:size=1;mtime=2")


def cm(
    name: str,
    attempt: int | None,
    kind: str,
    *,
    shards: list[str] | None = None,
    labels: dict[str, str] | None = None,
) -> ConfigMapData:
    data: dict[str, str] = {}
    if kind == "manifest":
        refs = tuple(ShardRef(s, i, i + 1) for i, s in enumerate(shards or []))
        data = Manifest("talk", attempt or 0, CUTTING, refs).to_data()
    base = {"recall.dev/job": "talk", LABEL_KIND: kind, LABEL_JOB_UID: UID}
    if attempt is not None:
        base[LABEL_ATTEMPT] = str(attempt)
    return ConfigMapData(name=name, data=data, labels={**base, **(labels or {})})


def job(phase: str, attempts: int, **status: Any) -> TranscriptionJob:
    return TranscriptionJob.from_api(
        {
            "metadata": {"name": "talk", "namespace": "default", "uid": UID},
            "spec": {"source": {"url": "file:///talk.wav"}},
            "status": {"phase": phase, "attempts": attempts, **status},
        }
    )


def checkpoint(name: str) -> dict[str, Any]:
    return {"progress": {"chunksDone": 3, "chunksTotal": 9, "checkpoint": name}}


def result(name: str) -> dict[str, Any]:
    return {"result": {"configMap": name, "token": "t" * 32, "attempt": 2}}


LEASE = {
    "lease": {
        "holder": "w",
        "token": "t" * 32,
        "acquireTime": "2026-11-30T12:00:00Z",
        "renewTime": "2026-11-30T12:00:00Z",
        "durationSeconds": 60,
    }
}

# Attempt 1 wrote three shards and died; attempt 2 resumed from its checkpoint (which then
# held shards 0 and 1), and attempt 1, a zombie, went on to write shard 2.
ATTEMPT_1 = [
    cm("talk-a1", 1, "manifest", shards=["talk-a1-0", "talk-a1-1", "talk-a1-2"]),
    cm("talk-a1-0", 1, "shard"),
    cm("talk-a1-1", 1, "shard"),
    cm("talk-a1-2", 1, "shard"),
]
ATTEMPT_2 = [
    cm("talk-a2", 2, "manifest", shards=["talk-a1-0", "talk-a1-1", "talk-a2-0"]),
    cm("talk-a2-0", 2, "shard"),
    cm("talk-a2-1", 2, "shard"),  # written before the checkpoint that will reference it
]
EVERYTHING = ATTEMPT_1 + ATTEMPT_2
NAMES = sorted(c.name for c in EVERYTHING)


def test_succeeded__everything_but_the_result_and_its_shards() -> None:
    assert unreferenced(job("Succeeded", 2, **result("talk-a2")), EVERYTHING) == [
        "talk-a1",
        "talk-a1-2",
        "talk-a2-1",
    ]


@pytest.mark.parametrize("phase", ["Failed", "Cancelled"])
def test_failed_or_cancelled__everything(phase: str) -> None:
    assert unreferenced(job(phase, 2, **checkpoint("talk-a2")), EVERYTHING) == NAMES


def test_leased__older_attempts_minus_what_the_checkpoint_references() -> None:
    leased = job("Leased", 2, **LEASE, **checkpoint("talk-a2"))
    assert unreferenced(leased, EVERYTHING) == ["talk-a1", "talk-a1-2"]


def test_leased__before_the_new_attempt_checkpoints_the_old_checkpoint_is_kept() -> None:
    leased = job("Leased", 2, **LEASE, **checkpoint("talk-a1"))
    assert unreferenced(leased, EVERYTHING) == []


def test_queued__every_attempt_so_far_minus_the_checkpoint() -> None:
    queued = job("Queued", 2, **checkpoint("talk-a2"))
    assert unreferenced(queued, EVERYTHING) == ["talk-a1", "talk-a1-2", "talk-a2-1"]


def test_queued_without_a_checkpoint__everything_so_far() -> None:
    assert unreferenced(job("Queued", 2), EVERYTHING) == NAMES


def test_a_job_read_before_a_newer_attempt_wrote_keeps_that_attempt() -> None:
    """The job is read first, then the list: the list may be newer than the job."""
    stale_view = job("Leased", 1, **LEASE, **checkpoint("talk-a1"))
    assert unreferenced(stale_view, EVERYTHING) == []
    queued_view = job("Queued", 1, **checkpoint("talk-a1"))
    assert unreferenced(queued_view, EVERYTHING) == []


@pytest.mark.parametrize(
    "view",
    [
        job("Succeeded", 2, **result("talk-a3")),
        job("Leased", 3, **LEASE, **checkpoint("talk-a3")),
        job("Queued", 3, **checkpoint("talk-a3")),
    ],
    ids=["result", "leased", "queued"],
)
def test_a_referenced_manifest_missing_from_the_list_names_nothing(view: TranscriptionJob) -> None:
    assert unreferenced(view, EVERYTHING) == []


def test_leftovers_of_a_deleted_namesake_are_always_named() -> None:
    other = [
        cm("talk-a1", 1, "manifest", labels={LABEL_JOB_UID: "the-old-job"}),
        cm("talk-a1-0", 1, "shard", labels={LABEL_JOB_UID: "the-old-job"}),
    ]
    leased = job("Leased", 1, **LEASE)
    assert unreferenced(leased, other) == ["talk-a1", "talk-a1-0"]


def test_the_earlier_single_config_map_layout() -> None:
    legacy = [cm("talk-transcript-1", 1, "transcript"), cm("talk-chunks-1", 1, "chunks")]
    done = job("Succeeded", 1, **result("talk-transcript-1"))
    assert unreferenced(done, legacy) == ["talk-chunks-1"]
    resumable = job("Queued", 1, **checkpoint("talk-chunks-1"))
    assert unreferenced(resumable, legacy) == ["talk-transcript-1"]


def test_config_maps_of_other_jobs_kinds_or_without_an_attempt_are_never_named() -> None:
    foreign = [
        cm("other-a1", 1, "manifest", labels={"recall.dev/job": "other"}),
        cm("talk-items", 1, "items"),
        cm("talk-a9", None, "manifest"),
    ]
    assert unreferenced(job("Queued", 9), foreign) == []
    assert unreferenced(job("Failed", 9), foreign) == ["talk-a9"]


def test_only_the_referenced_manifest_needs_its_data() -> None:
    """A metadata-only list plus the referenced manifest decides the same."""
    leased = job("Leased", 2, **LEASE, **checkpoint("talk-a2"))
    bare = [c if c.name == "talk-a2" else ConfigMapData(c.name, {}, c.labels) for c in EVERYTHING]
    assert unreferenced(leased, bare) == unreferenced(leased, EVERYTHING)
