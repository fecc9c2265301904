"""A Batch whose item phases no longer fit the status (`indexesTruncated`): past the cut the
stored status says nothing, so nothing there is a heal, and a projection of unchanged jobs
projects the same status again."""

from __future__ import annotations

import datetime as dt

from recall.operator.reconcile.project import known_below, project
from recall.resources import Batch, BatchStatus, indexes
from tests.unit.fakes import item_record

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
BATCH = Batch.from_api({"metadata": {"name": "big", "namespace": "ns", "uid": "b1"}, "spec": {}})
TOTAL = 100_000


def test_project__unchanged_jobs_past_a_cut_encoding_are_no_heals() -> None:
    # every third item failed: runs too many for the completed and failed encodings
    succeeded = item_record(BATCH, 0, {"phase": "Succeeded", "attempts": 1})
    failed = item_record(BATCH, 0, {"phase": "Failed", "attempts": 1})
    jobs = {i: failed if i % 3 == 0 else succeeded for i in range(TOTAL)}
    first = project(BATCH, TOTAL, str, jobs, BatchStatus(), NOW, frozenset(jobs))
    status = first.status
    assert status.indexes_truncated and status.counts is not None
    assert (status.counts.completed, status.counts.failed) == (66_666, 33_334)
    cut = known_below(status, TOTAL)
    assert 0 < cut < TOTAL
    assert indexes.count(status.completed_indexes) + indexes.count(status.failed_indexes) >= cut

    again = project(BATCH, TOTAL, str, jobs, status, NOW, frozenset())
    assert again.heals == [] and not again.status.heals
    assert again.status == status

    # a heal below the cut is still found: item 1's stored phase edited to failed
    assert (status.failed_indexes or "").startswith("0,3,")
    edited = status.model_copy(
        update={"failed_indexes": "0-1," + (status.failed_indexes or "")[2:]}
    )
    healed = project(BATCH, TOTAL, str, jobs, edited, NOW, frozenset())
    assert [h.index for h in healed.heals] == [1]


def test_known_below__a_whole_encoding_is_known_to_the_end() -> None:
    status = BatchStatus(completed_indexes="0-9", failed_indexes="10")
    assert known_below(status, 11) == 11
