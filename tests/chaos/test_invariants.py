"""The chaos checks themselves, on hand-made histories: a clean run passes, and each kind of
violation is caught with its invariant. No cluster."""

from __future__ import annotations

import pytest

from recall_dev.chaos.history import Fault, JobHistory, ProcessEnd, Version
from recall_dev.chaos.invariants import check
from recall_dev.chaos.invariants.verdict import RECLAIM_DELAY
from tests.chaos.histories import (
    SPEC,
    T0,
    T1,
    T2,
    Job,
    clean,
    event,
    invariants,
    key,
    lease,
    refinal,
    transcript,
)


def test_clean_history__no_violation() -> None:
    _, h = clean()
    verdict = check(h)
    assert verdict.violations == [], [v.describe() for v in verdict.violations]
    assert verdict.stats["lost"] == 0 and verdict.stats["duplicates"] == 0
    (kill,) = verdict.kills
    assert kill.delay == pytest.approx(2.4) and kill.ended_by == "reclaim"


def test_stale_token_writes_after_the_next_claim__invariant_1() -> None:
    job, h = clean()
    job.versions.insert(-1, Version(T0 + 4.8, 0, 0, True, SPEC, job.versions[2].status))
    job.versions = sorted(job.versions, key=lambda v: v.t)
    job.versions = [
        Version(v.t, 200 + i, 0, v.listed, v.spec, v.status) for i, v in enumerate(job.versions)
    ]
    refinal(h, job)
    assert 1 in invariants(check(h))


def test_two_workers_claim_one_attempt__invariant_1() -> None:
    _, h = clean()
    h.logs.append(event(T0 + 1, "w9", "claimed", job="j", attempt=1, token="cccccccc"))
    assert 1 in invariants(check(h))


def test_result_of_a_non_holder__invariant_2() -> None:
    job = Job()
    job.claim(T0 + 1, T1, "w1")
    job.see(
        T0 + 2,
        phase="Succeeded",
        lease=None,
        fence=f"{T2}/7",
        result={"transcript": key("j", 1, T2), "token": T2, "attempt": 1, "worker": "w9"},
    )
    _, h = clean()
    refinal(h, job)
    h.final.transcripts = {key("j", 1, T2): transcript("j", [0, 1], 1, T2)}
    h.final.objects = [key("j", 1, T2)]
    assert 2 in invariants(check(h))


def test_result_changed_after_acceptance__invariant_2() -> None:
    job, h = clean()
    result = {**job.status["result"], "transcript": key("j", 1, T2)}
    job.see(T0 + 6, result=result)
    refinal(h, job)
    assert 2 in invariants(check(h))


def test_stale_write_accepted__invariant_2() -> None:
    _, h = clean()
    h.faults.append(Fault(T0 + 3, "stale-write", "j", {"outcome": "accepted"}))
    assert 2 in invariants(check(h))


def test_job_still_leased_at_the_end__invariant_3() -> None:
    _, h = clean()
    h.final.jobs["j"]["status"] = {"phase": "Leased", "lease": lease(T2, "w2", T0)}
    assert 3 in invariants(check(h))
    del h.final.jobs["j"]
    assert 3 in invariants(check(h))


def test_two_attempts_told_they_won__invariant_4() -> None:
    _, h = clean()
    h.logs.append(event(T0 + 5, "w1", "completed", job="j", attempt=1, token=T1[:8]))
    verdict = check(h)
    assert 4 in invariants(verdict) and verdict.stats["duplicates"] == 1


def test_transcript_with_a_gap__invariant_4_and_missing__invariant_8() -> None:
    _, h = clean()
    h.final.transcripts[key("j", 2, T2)] = transcript("j", [0])
    assert 4 in invariants(check(h))
    h.final.transcripts.clear()
    h.final.objects.clear()
    messages = [v.message for v in check(h).violations if v.invariant == 8]
    assert messages == [f"the accepted transcript {key('j', 2, T2)} is not in the bucket"]


def test_chunk_never_transcribed__invariant_4() -> None:
    _, h = clean()
    h.engine = [{"job": "j", "attempt": 2, "chunk": 1}]
    assert 4 in invariants(check(h))


def test_reclaim_within_a_lease_of_a_renewal__invariant_5() -> None:
    job = Job()
    job.claim(T0 + 1, T1, "w1").renew(T0 + 3.0, 2)
    job.reclaim(T0 + 4.0)  # 1 s after a renewal of a 2 s lease
    job.claim(T0 + 4.2, T2, "w2").complete(T0 + 5, 2)
    _, h = clean()
    refinal(h, job)
    verdict = check(h)
    assert 5 in invariants(verdict)
    assert verdict.stats["reclaim_margin_min"] == pytest.approx(-1.0)


def test_batch_item_differs_from_its_job__invariant_6() -> None:
    _, h = clean()
    h.final.jobs["b-x"] = {**h.final.jobs["j"], "name": "b-x"}
    h.final.batches = [
        {
            "metadata": {"name": "b"},
            "spec": {"items": [{"key": "x", "source": {"url": "file:///x"}}]},
            "status": {"counts": {"total": 1, "queued": 1}},
        }
    ]
    assert 6 in invariants(check(h))
    h.final.batches[0]["status"] = {"counts": {"total": 1, "completed": 1}, "completedIndexes": "0"}
    assert 6 not in invariants(check(h))


def test_attempts_over_the_budget_or_uncounted__invariant_7() -> None:
    job, h = clean()
    job.see(T0 + 7, attempts=9)
    refinal(h, job)
    assert 7 in invariants(check(h))
    job, h = clean()
    job.see(T0 + 7, expiredLeases=0)
    refinal(h, job)
    assert 7 in invariants(check(h))


def test_worker_exited_on_its_own__invariant_9() -> None:
    _, h = clean()
    h.processes.append(ProcessEnd("w3", "worker", T0, None, T0 + 3, "exited", 1, "Traceback"))
    assert 9 in invariants(check(h))


def test_stopped_worker_that_aborts__reported_not_invariant_9() -> None:
    _, h = clean()
    h.processes.append(ProcessEnd("w4", "worker", T0, None, T0 + 3, "terminated", -6, "{...}"))
    verdict = check(h)
    assert 9 not in invariants(verdict)
    assert verdict.stats["unclean_stops"] == ["w4: -6"]


def test_slow_reclaim_after_a_kill__flagged_unless_the_operator_was_down() -> None:
    job = Job()
    job.claim(T0 + 1, T1, "w1").renew(T0 + 1.5, 2)
    job.reclaim(T0 + 6.0)  # 4.4 s after the kill: lease 2 s + 2 ticks is 3 s
    job.claim(T0 + 6.2, T2, "w2").complete(T0 + 7, 2)
    _, h = clean()
    refinal(h, job)
    assert RECLAIM_DELAY in invariants(check(h))
    h.faults.append(Fault(T0 + 2, "operator-kill", "op-a-1", {"leader": True}))
    h.logs.append(event(T0 + 3.5, "op-b-1", "leader_elected"))
    verdict = check(h)
    assert RECLAIM_DELAY not in invariants(verdict)
    (kill,) = verdict.kills
    assert kill.recovered == T0 + 3.5 and kill.bound == pytest.approx(3.5 - 1.6 + 3)


def test_item_moved_back_from_completed__invariant_6() -> None:
    _, h = clean()
    h.final.jobs["b-x"] = {**h.final.jobs["j"], "name": "b-x"}
    done = {"counts": {"total": 1, "completed": 1}, "completedIndexes": "0"}
    h.final.batches = [
        {
            "metadata": {"name": "b"},
            "spec": {"items": [{"key": "x", "source": {"url": "file:///x"}}]},
            "status": done,
        }
    ]
    back = {"counts": {"total": 1, "transcribing": 1}, "transcribingIndexes": "0"}
    h.batches = {
        "b": JobHistory(
            "b",
            [
                Version(T0 + 5, 10, 0, False, {}, done),
                Version(T0 + 6, 11, 0, False, {}, back),
                Version(T0 + 9, 12, 0, False, {}, done),
            ],
        )
    }
    messages = [v.message for v in check(h).violations if v.invariant == 6]
    assert messages == ["item x moved back from completed to transcribing"]
