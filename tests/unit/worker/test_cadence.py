"""When a lease holder writes: the heartbeat and the checkpoint on one wall-time cadence."""

from __future__ import annotations

import pytest

from recall.worker.cadence import Cadence

C = Cadence(heartbeat=40.0, checkpoint=10.0)


@pytest.mark.parametrize(
    ("since_renewal", "since_checkpoint", "pending", "due"),
    [
        (0.0, 0.0, False, 40.0),  # just renewed, nothing new: the next heartbeat
        (39.0, 39.0, False, 1.0),
        (41.0, 41.0, False, -1.0),  # a heartbeat is overdue
        (0.0, 0.0, True, 10.0),  # new chunks, checkpoint just written: wait the interval
        (3.0, 12.0, True, -2.0),  # new chunks and the interval has passed: now
        (38.0, 5.0, True, 2.0),  # the heartbeat comes first and carries the chunks
        (5.0, 5.0, True, 5.0),
    ],
)
def test_due(since_renewal: float, since_checkpoint: float, pending: bool, due: float) -> None:
    assert C.due(
        since_renewal=since_renewal, since_checkpoint=since_checkpoint, pending=pending
    ) == pytest.approx(due)


def test_writes_per_job__bounded_by_wall_time_not_by_chunks() -> None:
    """Simulated: chunks made durable every 50 ms for 300 s; the holder renews whenever due."""
    renewals, since_renewal, since_checkpoint, pending = 0, 0.0, 0.0, False
    t, step = 0.0, 0.05
    while t < 300.0:
        t += step
        since_renewal += step
        since_checkpoint += step
        pending = True  # a chunk became durable
        if (
            C.due(since_renewal=since_renewal, since_checkpoint=since_checkpoint, pending=pending)
            <= 0
        ):
            renewals += 1
            since_renewal = since_checkpoint = 0.0
            pending = False
    assert renewals == 30  # one per checkpoint interval, for 6,000 chunks


def test_fresh__leaves_the_heartbeater_half_an_interval_to_land_its_write() -> None:
    # An engine call needs a write within `fresh`; the heartbeater sends one every `heartbeat`.
    # Were they equal, the engine would meet the heartbeater's write in flight once an interval.
    assert C.fresh == 60.0 > C.heartbeat
    # ... and never past halfway from the heartbeat to the renew deadline.
    assert Cadence(heartbeat=40.0, checkpoint=10.0, renew_deadline=80.0).fresh == 60.0
    assert Cadence(heartbeat=40.0, checkpoint=10.0, renew_deadline=61.0).fresh == 50.5
    with pytest.raises(ValueError, match="deadline"):
        Cadence(heartbeat=40.0, checkpoint=10.0, renew_deadline=40.0)
    with pytest.raises(ValueError, match="positive"):
        Cadence(heartbeat=0, checkpoint=10)
