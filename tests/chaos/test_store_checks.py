"""The chaos checks that read the bucket (invariants 4 and 8 on the objects, 10 on the API
server) and the verdict of a drain that ran out of time, on hand-made histories. No cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recall_dev.chaos.history import History
from recall_dev.chaos.invariants import check
from recall_dev.chaos.outcome import Outcome
from tests.chaos.histories import SPEC, T0, T1, T2, Job, clean, event, invariants, key, refinal

INDEX = "index/chaos/b/uid-b/x.json"


def messages(h: History, invariant: int) -> list[str]:
    return [v.message for v in check(h).violations if v.invariant == invariant]


def queued_with_checkpoint() -> tuple[Job, History]:
    """j reclaimed after attempt 1 stored chunk 0 (its checkpoint names it); the drain ends
    before anyone claims it again."""
    job, h = clean()
    job.versions = job.versions[:4]
    job.status = dict(job.versions[-1].status)
    part = {"attempt": 1, "token": T1, "first": 0, "end": 1}
    job.see(T0 + 4.1, progress={"chunksDone": 1, "chunksTotal": 2, "parts": [part]})
    refinal(h, job)
    h.logs = [e for e in h.logs if e.process != "w2"]
    h.final.transcripts = {}
    h.final.objects = [key("j", 1, T1, "cutting.json"), key("j", 1, T1, "c000000.json")]
    return job, h


def published_in_batch(h: History, batch_uid: str = "uid-b") -> dict[str, Any]:
    """j as the published item x of Batch b (whose UID is `batch_uid`), with a json output."""
    final = h.final.jobs["j"]
    final["spec"] = {
        **SPEC,
        "source": {"url": "file:///media/x.wav"},
        "batchRef": "b",
        "item": "x",
        "output": {"url": "s3://chaos/published/{batch}/{key}", "formats": ["json"]},
    }
    final["status"]["published"] = {"time": "t", "formats": ["json"], "index": INDEX}
    h.final.batches = [{"metadata": {"name": "b", "uid": batch_uid}, "spec": {"items": []}}]
    h.final.objects += [INDEX, key("j", 2, T2, "out.json"), "published/b/x.json"]
    return final


def test_clean_history_with_its_bucket__no_violation() -> None:
    _, h = clean()
    published_in_batch(h)
    h.final.copies = {INDEX: "same", "published/b/x.json": "same"}
    verdict = check(h)
    assert verdict.violations == [], [v.describe() for v in verdict.violations]
    assert verdict.stats["objects_left"] == 0 and verdict.stats["objects"] == 4


def test_result_names_another_attempts_transcript__invariant_4() -> None:
    job, h = clean()
    job.status["result"] = {**job.status["result"], "transcript": key("j", 1, T2)}
    refinal(h, job)
    h.final.transcripts = {key("j", 1, T2): h.final.transcripts[key("j", 2, T2)]}
    h.final.objects = [key("j", 1, T2)]
    assert any("not that attempt's transcript" in m for m in messages(h, 4))


def test_transcript_written_by_another_attempt__invariant_4() -> None:
    _, h = clean()
    h.final.transcripts[key("j", 2, T2)]["attempt"] = 1
    assert any("written by another attempt" in m for m in messages(h, 4))


def test_unreferenced_objects_after_the_drain__invariant_8_says_which() -> None:
    _, h = clean()
    zombie = [key("j", 1, T1, "cutting.json"), key("j", 1, T1, "c000000.json"), "stray/x"]
    h.final.objects += zombie
    (violation,) = [v for v in check(h).violations if v.invariant == 8]
    assert violation.message.startswith("3 unreferenced object(s) left in the bucket")
    assert violation.evidence == (
        f"{key('j', 1, T1, '')} (2): c000000.json, cutting.json",
        "stray/ (1): x",
    )


def test_checkpoint_of_a_job_not_ended__kept_and_required() -> None:
    _, h = queued_with_checkpoint()
    h.drained = T0 + 11  # as if it had ended: only the bucket is looked at here
    h.expected = {}
    assert not [v for v in check(h).violations if v.invariant == 8]
    h.final.objects = h.final.objects[:1]  # chunk 0 deleted while the checkpoint names it
    assert messages(h, 8) == ["1 referenced object(s) not in the bucket"]


def test_index_entry__kept_only_for_the_batch_that_exists() -> None:
    _, h = clean()
    published_in_batch(h)
    assert not messages(h, 8)
    published_in_batch(h, batch_uid="uid-of-a-namesake")
    assert messages(h, 8) == [
        "1 unreferenced object(s) left in the bucket after 0 s of collection after the drain"
    ]


def test_published_output_missing_or_not_the_accepted_one() -> None:
    _, h = clean()
    published_in_batch(h)
    h.final.objects.remove("published/b/x.json")
    assert messages(h, 8) == ["1 referenced object(s) not in the bucket"]
    h.final.copies = {INDEX: "differs"}
    assert messages(h, 4) == [f"the published copy {INDEX} is not the accepted result's"]


def test_config_map_with_work_and_a_big_job__invariant_10() -> None:
    _, h = clean()
    h.final.config_maps["j-transcript-2"] = 70_000
    h.final.job_bytes["j"] = 5000
    assert messages(h, 10) == [
        "ConfigMap j-transcript-2 (70000 bytes of data) in the namespace",
        "the job is 5000 bytes as the API server serves it (>= 4 KiB)",
    ]


def test_completed_logged_after_the_final_read__timing_not_invariant_4() -> None:
    _, h = queued_with_checkpoint()
    h.drained, h.not_ended = None, ["j"]
    h.logs.append(event(h.final.read_at + 2, "w2", "completed", job="j", attempt=2, token=T2[:8]))
    verdict = check(h)
    assert 4 not in invariants(verdict)
    assert verdict.stats["completed_after_final_read"] == 1
    h.logs.append(event(h.final.read_at - 2, "w2", "completed", job="j", attempt=2, token=T2[:8]))
    assert messages(h, 4) == ["completed was logged but the job is Queued"]


def test_drain_timed_out__its_own_verdict_not_lost_jobs() -> None:
    _, h = queued_with_checkpoint()
    h.drained, h.not_ended = None, ["j"]
    h.final.objects.append("stray/x")  # not judged: nothing was collected after a drain
    outcome = Outcome(check(h), h, Path("."))
    assert not outcome.ok
    assert outcome.verdict.violations == []
    assert outcome.line.startswith("chaos seed=0  0 s: drain timed out: 1 jobs not ended; ")
    assert "lost n/a" in outcome.line and "violations: none" in outcome.line
    report = outcome.report()
    assert report.startswith("[drain timed out] 1 jobs not ended by the drain's deadline")
    assert "j: Queued at the end" in report and "not checked without a finished drain" in report


def test_publish_record__the_one_change_a_finished_job_takes() -> None:
    job, h = clean()  # published after it succeeded
    assert 2 not in invariants(check(h))
    job.see(T0 + 7, published={"time": "t2", "formats": []})
    refinal(h, job)
    assert "a finished job changed" in messages(h, 2)


def test_succeeded_job_never_published_after_the_drain__invariant_6() -> None:
    _, h = clean()
    del h.final.jobs["j"]["status"]["published"]
    assert messages(h, 6) == ["1 Succeeded job(s) never published (the publish record)"]
    h.drained, h.not_ended = None, ["x"]  # not judged before every job ended
    assert messages(h, 6) == []
