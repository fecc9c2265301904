"""The chaos checks themselves, on hand-made histories: a clean run passes, and each kind of
violation is caught with its invariant. No cluster."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from recall_dev.chaos.history import (
    Fault,
    Final,
    History,
    JobHistory,
    LogEvent,
    ProcessEnd,
    Version,
)
from recall_dev.chaos.invariants import Verdict, check

T0 = 1_000_000.0
T1 = "a" * 32
T2 = "b" * 32
SPEC: dict[str, Any] = {
    "leaseDurationSeconds": 2,
    "maxAttempts": 3,
    "maxReleases": 10,
    "engine": {"name": "simulated", "simulate": {"chunks": 2}},
}


def iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat().replace("+00:00", "Z")


def lease(token: str, holder: str, renewed: float) -> dict[str, Any]:
    return {
        "holder": holder,
        "token": token,
        "acquireTime": iso(T0),
        "renewTime": iso(renewed),
        "durationSeconds": 2,
    }


class Job:
    """Builds one job's versions, as the recorder would have seen them."""

    def __init__(self, name: str = "j") -> None:
        self.name = name
        self.versions: list[Version] = []
        self.status: dict[str, Any] = {"phase": "Queued"}
        self.rv = 100
        self.see(T0)

    def see(self, t: float, **changes: Any) -> Job:
        status = {**self.status, **changes}
        self.status = {k: v for k, v in status.items() if v is not None}
        self.rv += 1
        self.versions.append(Version(t, self.rv, 0, False, SPEC, dict(self.status)))
        return self

    def claim(self, t: float, token: str, holder: str) -> Job:
        return self.see(
            t,
            phase="Leased",
            lease=lease(token, holder, t),
            fence=f"{token}/1",
            attempts=self.status.get("attempts", 0) + 1,
        )

    def renew(self, t: float, n: int) -> Job:
        held = self.status["lease"]
        token = held["token"]
        return self.see(t, lease={**held, "renewTime": iso(t)}, fence=f"{token}/{n}")

    def complete(self, t: float, n: int) -> Job:
        held = self.status["lease"]
        result = {
            "configMap": f"{self.name}-a{self.status['attempts']}",
            "token": held["token"],
            "attempt": self.status["attempts"],
            "worker": held["holder"],
        }
        return self.see(
            t, phase="Succeeded", lease=None, fence=f"{held['token']}/{n}", result=result
        )

    def reclaim(self, t: float) -> Job:
        token = self.status["lease"]["token"]
        return self.see(
            t,
            phase="Queued",
            lease=None,
            fence=f"{token}/reclaim-{self.status['attempts']}",
            expiredLeases=self.status.get("expiredLeases", 0) + 1,
            lastError={"reason": "LeaseExpired", "time": iso(t)},
        )

    def history(self) -> JobHistory:
        return JobHistory(self.name, list(self.versions))

    def final(self) -> dict[str, Any]:
        return {"name": self.name, "spec": SPEC, "status": dict(self.status), "labels": {}}


def transcript(name: str, chunks: list[int]) -> dict[str, str]:
    segments = [
        {"start": i * 30.0, "end": i * 30.0 + 30, "text": f"{name} chunk {i} the quick"}
        for i in chunks
    ]
    return {"segments.json": json.dumps(segments), "transcript.txt": ""}


def event(t: float, process: str, name: str, **fields: Any) -> LogEvent:
    return LogEvent(t, process, name, {"event": name, **fields})


def clean() -> tuple[Job, History]:
    """w1 claims j, is killed; the operator reclaims; w2 claims and completes."""
    job = Job()
    job.claim(T0 + 1, T1, "w1").renew(T0 + 1.5, 2)
    job.reclaim(T0 + 4.0)
    job.claim(T0 + 4.2, T2, "w2").renew(T0 + 4.5, 2).complete(T0 + 5, 3)
    history = History(
        jobs={"j": job.history()},
        relists=[],
        logs=[
            event(T0 + 1, "w1", "claimed", job="j", attempt=1, token=T1[:8]),
            event(T0 + 4.2, "w2", "claimed", job="j", attempt=2, token=T2[:8]),
            event(T0 + 5, "w2", "completed", job="j", attempt=2, token=T2[:8]),
        ],
        self_faults=[],
        engine=[
            {"job": "j", "attempt": 1, "chunk": 0},
            {"job": "j", "attempt": 2, "chunk": 1},
        ],
        faults=[
            Fault(
                T0 + 1.6,
                "worker-kill",
                "w1",
                {"leases": [{"job": "j", "token": T1, "duration": 2}]},
            )
        ],
        leaders=[],
        processes=[ProcessEnd("w1", "worker", T0, None, T0 + 1.6, "killed", -9, "")],
        final=Final(
            jobs={"j": job.final()},
            batches=[],
            config_maps={"j-a2": transcript("j", [0, 1])},
        ),
        expected={"j": "normal"},
        started=T0,
        faults_ended=T0 + 10,
        drained=T0 + 11,
        tick=0.5,
    )
    return job, history


def invariants(verdict: Verdict) -> set[int]:
    return {v.invariant for v in verdict.violations}


def refinal(h: History, job: Job) -> None:
    h.jobs = {job.name: job.history()}
    h.final.jobs = {job.name: job.final()}


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
        result={"configMap": "j-a1", "token": T2, "attempt": 1, "worker": "w9"},
    )
    _, h = clean()
    refinal(h, job)
    h.final.config_maps = {"j-a1": transcript("j", [0, 1])}
    assert 2 in invariants(check(h))


def test_result_changed_after_acceptance__invariant_2() -> None:
    job, h = clean()
    result = {**job.status["result"], "configMap": "other"}
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
    h.final.config_maps["j-a2"] = transcript("j", [0])
    assert 4 in invariants(check(h))
    h.final.config_maps.clear()
    assert 8 in invariants(check(h))


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
    assert 10 in invariants(check(h))
    h.faults.append(Fault(T0 + 2, "operator-kill", "op-a-1", {"leader": True}))
    h.logs.append(event(T0 + 3.5, "op-b-1", "leader_elected"))
    verdict = check(h)
    assert 10 not in invariants(verdict)
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
