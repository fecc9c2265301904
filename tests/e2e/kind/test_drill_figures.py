"""The drills' measures (tests/e2e/pods/drills.py), checked fast on made-up ledgers: what the
drills of `make e2e-kind` and the short one of test_kind.py report and assert on.

- "back after", fault → new holder, counts only progress under another lease than the one the
  job had at the fault (a cut worker's renewals landing after the fault are not the job
  running again), and end → progress starts at the fault's end;
- a reclaim's delay runs from the lease's last renewTime to the sample that shows it;
- duplicates count a result that changed or came from two attempts, completions the Batch
  counts twice, and results index entries of another attempt;
- the cut drill's stale store objects are those of the cut attempts written after their renew
  deadline, or that appeared after the network returned;
- the table names each drill's lease and how its "back after" was measured;
- a drill takes away a worker node that runs workers and not the leading operator.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.e2e.pods import drills
from tests.e2e.pods.drills import FROM_END, FROM_FAULT, Ledger, Seen

T1, T2 = "1" * 32, "2" * 32
START = 1_800_000_000.0  # the wall clock at monotonic 0


def s(
    at: float,
    phase: str = "Leased",
    token: str = T1,
    chunks: int = 0,
    *,
    holder: str = "w1",
    renewed: float = 0.0,
    reclaimed: int = 0,
    result: str = "",
    attempt: int = 0,
    published: str = "",
) -> Seen:
    leased = phase == "Leased"
    return Seen(
        at=at,
        wall=START + at,
        phase=phase,
        holder=holder if leased else "",
        token=token if leased else "",
        renewed=renewed if leased else 0.0,
        chunks=chunks,
        attempts=1,
        reclaimed=reclaimed,
        released=0,
        result=result,
        result_attempt=attempt,
        published=published,
    )


def test_seen__reads_the_lease_the_result_and_where_it_was_published() -> None:
    job = {
        "metadata": {"name": "cut-j0"},
        "status": {
            "phase": "Succeeded",
            "lease": {"holder": "w1", "token": T1, "renewTime": "2026-12-02T05:43:10.250000Z"},
            "progress": {"chunksDone": 8},
            "expiredLeases": 1,
            "result": {"token": T2, "attempt": 2, "transcript": "scratch/x/transcript.json"},
            "published": {"index": "index/ns/cut/uid/j0.json"},
        },
    }
    found = drills.seen(job, at=3.0, wall=START)
    assert found.renewed == pytest.approx(1_796_190_190.25)
    assert (found.result, found.result_attempt) == (T2, 2)
    assert found.published == "index/ns/cut/uid/j0.json"
    assert drills.seen({"metadata": {"name": "q"}}, at=0).renewed == 0.0


def test_back_to_new_holder__the_old_holders_late_renewals_are_not_the_job_running_again() -> None:
    history = {
        "cut-j0": [
            s(9.5, chunks=3, renewed=START + 9),
            s(10.5, chunks=4, renewed=START + 10.2),  # a renewal that landed after the fault
            s(22.5, "Queued", chunks=4, reclaimed=1),
            s(23.0, token=T2, chunks=4, holder="w2", reclaimed=1),
            s(24.0, token=T2, chunks=5, holder="w2", reclaimed=1),
        ]
    }
    assert drills.back_to_new_holder(history, 10.0, ["cut-j0"]) == 14.0


def test_back_to_new_holder__a_new_lease_first_seen_past_the_checkpoint_is_progress() -> None:
    history = {
        "j": [s(9.5, chunks=3), s(22.0, "Queued", chunks=4), s(23.0, token=T2, chunks=6)],
    }
    assert drills.back_to_new_holder(history, 10.0, ["j"]) == 13.0
    # A new attempt that started again from zero counts from where it was first seen.
    restarted = {"j": [s(9.5, chunks=3), s(23.0, token=T2, chunks=1), s(25.0, token=T2, chunks=2)]}
    assert drills.back_to_new_holder(restarted, 10.0, ["j"]) == 15.0


def test_back_to_new_holder__the_old_leases_result_or_no_progress_is_never_back() -> None:
    done_by_old = {"j": [s(9.5, chunks=3), s(11.0, "Succeeded", result=T1, chunks=8)]}
    assert drills.back_to_new_holder(done_by_old, 10.0, ["j"]) == math.inf
    stuck = {"j": [s(9.5, chunks=3), s(12.0, chunks=5)]}
    assert drills.back_to_new_holder(stuck, 10.0, ["j"]) == math.inf
    done_by_new = {"j": [s(9.5, chunks=3), s(30.0, "Succeeded", result=T2, chunks=8)]}
    assert drills.back_to_new_holder(done_by_new, 10.0, ["j"]) == 20.0


def test_back_after_end__from_the_faults_end_for_the_jobs_in_flight_and_not_done() -> None:
    history = {
        # leased at the fault (10), nothing sampled while the API server was away, then on
        "a": [s(9.5, chunks=2), s(20.5, chunks=2), s(21.5, chunks=3)],
        # released during a drain, resumed by another worker from its checkpoint
        "b": [s(9.5, chunks=2), s(19.0, "Queued", chunks=3), s(21.0, token=T2, chunks=4)],
        "done-before-the-end": [s(9.5, chunks=7), s(15.0, "Succeeded", result=T1)],
        "not-in-flight": [s(9.5, "Queued"), s(40.0, token=T2, chunks=1)],
    }
    assert drills.back_after_end(history, 10.0, 20.0) == 1.5
    assert drills.back_after_end({"q": [s(9.5, "Queued")]}, 10.0, 20.0) == 0.0


def test_reclaim_delays__from_the_leases_last_renewal_to_the_sample_that_shows_the_reclaim() -> (
    None
):
    history = {
        "j": [
            s(9.0, renewed=START + 8.5),
            s(9.5, renewed=START + 9.4),
            s(22.0, "Queued", reclaimed=1),
        ],
        "never": [s(9.5, token=T2, renewed=START + 9.0), s(30.0, token=T2, renewed=START + 29)],
    }
    assert drills.reclaim_delays(history, 10.0, ["j", "never"]) == {"j": pytest.approx(12.6)}


def test_leases_of__every_lease_of_the_holders_since_with_its_last_renewal() -> None:
    history = {
        "a": [s(5.0, renewed=START + 4), s(9.0, renewed=START + 8.5), s(21.0, "Queued")],
        "b": [s(9.0, token=T2, holder="w2", renewed=START + 8)],
        "c": [s(1.0, token="3" * 32, renewed=START + 1), s(2.0, "Succeeded", result="3" * 32)],
    }
    assert drills.leases_of(history, {"w1"}, since=8.0) == {T1: START + 8.5}


def test_duplicates__a_changed_result_a_second_attempt_and_a_completion_counted_twice() -> None:
    history = {
        "one": [s(1, "Succeeded", result=T1, attempt=1), s(2, "Succeeded", result=T1, attempt=1)],
        "changed": [s(1, "Succeeded", result=T1, attempt=1), s(2, "Succeeded", result=T2)],
        "attempts": [s(1, "Succeeded", result=T1, attempt=1), s(2, "Succeeded", result=T1)],
    }
    assert drills.duplicate_results(history) == {"changed", "attempts"}
    assert drills.extra_completions(8, "0-7", 8) == 0
    assert drills.extra_completions(9, "0-7", 8) == 1
    assert drills.extra_completions(8, "0-3,3-6", 8) == 1


def test_index_mismatches__an_entry_written_by_another_attempt() -> None:
    final = {
        "ok": s(1, "Succeeded", result=T1, published="index/a.json"),
        "other": s(1, "Succeeded", result=T1, published="index/b.json"),
        "missing": s(1, "Succeeded", result=T1, published="index/c.json"),
        "unpublished": s(1, "Succeeded", result=T1),
    }
    entries = {"index/a.json": T1, "index/b.json": T2, "index/c.json": None}
    assert drills.index_mismatches(final, entries) == {"other"}


def dt_iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat()


def key(token: str, name: str = "c000003.json") -> str:
    return f"scratch/recall-drill/cut-j0/uid/a1-{token}/{name}"


def test_stale_objects__written_after_the_renew_deadline_or_landed_after_the_network_returned() -> (
    None
):
    deadline = START + 20
    before = {
        key(T1, "c000001.json"): dt_iso(deadline + 4),  # listed while cut, written too late
        key(T1, "c000002.json"): dt_iso(deadline - 3),
        key(T2, "c000009.json"): dt_iso(deadline + 60),  # another lease's: not theirs
        "scratch/.probe": dt_iso(deadline + 60),
    }
    cut = deadline - 8
    after = {
        **before,
        key(T1, "transcript.json"): dt_iso(deadline - 5),  # landed while cut off: stale
        key(T1, "c000000.json"): dt_iso(cut - 2),  # written before the cut, listed only later
    }
    found = drills.stale_objects(before, after, {T1: deadline}, cut_at=cut)
    assert found == [key(T1, "c000001.json"), key(T1, "transcript.json")]
    # The store keeps LastModified to the second: within a second of the deadline is not stale.
    late = {key(T1): dt_iso(deadline + 0.9)}
    assert drills.stale_objects(late, {}, {T1: deadline}, cut_at=cut) == []


class FakeKube:
    def __init__(self, completed: int, indexes: str) -> None:
        self.batch = SimpleNamespace(
            status=SimpleNamespace(
                counts=SimpleNamespace(completed=completed), completed_indexes=indexes
            )
        )

    def list_jobs(self, namespace: str) -> Any:
        return SimpleNamespace(items=[])

    def get_batch(self, namespace: str, name: str) -> Any:
        return self.batch


def ledger(history: dict[str, list[Seen]], completed: int = 2, indexes: str = "0-1") -> Ledger:
    kube: Any = FakeKube(completed, indexes)
    found = Ledger(kube, "recall-drill")
    found.history = {f"cut-{k}": v for k, v in history.items()}
    return found


def test_figures__the_measure_the_lease_and_every_kind_of_duplicate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = {
        "j0": [
            s(9.5, chunks=3, renewed=START + 9.4),
            s(22.0, "Queued", chunks=3, reclaimed=1),
            s(23.0, token=T2, chunks=4, reclaimed=1, holder="w2"),
            s(30.0, "Succeeded", result=T2, attempt=2, reclaimed=1, published="index/j0.json"),
        ],
        "j1": [
            s(9.5, token="3" * 32, chunks=5, holder="w2"),
            s(12.0, "Succeeded", result="3" * 32, attempt=1, published="index/j1.json"),
        ],
    }
    found = drills.figures(
        ledger(history), "cut", "worker node cut off", 10.0, 2, lease=12, moved=["cut-j0"],
        index={"index/j0.json": T2, "index/j1.json": "3" * 32}, extra_note=1,
    )  # fmt: skip
    assert (found.lease_seconds, found.in_flight, found.back_seconds) == (12, 2, 13.0)
    assert (found.back_measure, found.reclaimed, found.duplicates, found.lost) == (
        FROM_FAULT,
        1,
        0,
        0,
    )
    assert found.notes["duplicates_by"] == {"results": 0, "batch_status": 0, "results_index": 0}
    assert found.notes["index_entries_missing"] == [] and found.notes["extra_note"] == 1

    doubled = drills.figures(
        ledger(history, completed=3), "cut", "x", 10.0, 2, lease=12, ended_at=12.0,
        index={"index/j0.json": T1, "index/j1.json": None},
    )  # fmt: skip
    assert doubled.back_measure == FROM_END
    assert doubled.duplicates == 2, doubled.notes  # a completion too many, an entry of T1
    assert doubled.notes["index_entries_missing"] == ["index/j1.json"]
    with pytest.raises(ValueError, match="the fault's end"):
        drills.figures(ledger(history), "cut", "x", 10.0, 2, lease=12)

    monkeypatch.setenv("RECALL_DRILLS_DIR", str(tmp_path))
    found.write()
    (tmp_path / "older.json").write_text(json.dumps({"drill": "older", "jobs": 8}))
    lines = drills.table().splitlines()
    assert lines[0].startswith("| drill | jobs | lease (s) | in flight | back after (s) | measured")
    assert lines[2].startswith(f"| worker node cut off | 2 | 12 | 2 | 13.0 | {FROM_FAULT} | 1 |")
    assert lines[3].startswith("| older | 8 | ? |")


def test_target_node__a_worker_node_without_the_leader_that_runs_workers() -> None:
    nodes = ["c-worker", "c-worker2"]
    workers = {"w1": "c-control-plane", "w2": "c-worker", "w3": "c-worker2", "w4": "c-worker2"}
    assert drills.target_node(workers, nodes, leader_node="c-worker") == "c-worker2"
    assert drills.target_node(workers, nodes, leader_node="c-worker2") == "c-worker"
    # Both operators on one node, no worker on the other: the one with workers, never the
    # leader's.
    only = {"w1": "c-control-plane", "w2": "c-worker", "w3": "c-worker"}
    assert drills.target_node(only, nodes, leader_node="c-worker2") == "c-worker"
    with pytest.raises(ValueError, match="no worker node without the leading operator"):
        drills.target_node(only, nodes, leader_node="c-worker")
