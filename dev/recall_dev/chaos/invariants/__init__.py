"""The invariants of DESIGN §5, checked on the recorded history of a chaos run. Pure.

`check(history) -> Verdict`: every violation with its evidence, and the numbers of the run.
The checks, by module: `leases` (1, 2), `results` (4, 8, and 2 on results), `objects` (8
against the bucket's listing, 4 on published copies, 10), `jobs` (3, 7), `reclaims` (5, and
the reclaim delay as 12), `batches` (6, and the item lag), `processes` (9), `numbers` (the
rest of the line); `verdict` is what they report.

A drain that ran out of time is not a violation but its own verdict (`Verdict.drain`: "drain
timed out: N jobs not ended"); the checks that need a finished drain (3, 6 at the end, 8's
"nothing unreferenced left") are then left out, and every other check still counts.

What can be checked, and from what:

1. *One valid lease at a time.* The API server's history of a job is linear (one
   resourceVersion after another), so "at most one valid lease" means: a lease exists exactly
   while the job is Leased; a new lease token appears only with a claim (attempts + 1, fence
   `<token>/1`, from a version without a lease); a token, once another has written, never
   writes again (its fence runs are contiguous); a token's holder, attempt and acquireTime
   never change; and no two workers log a claim of the same attempt. Observed *times* add
   nothing here: the recorder sees one job's versions in order, so its observed intervals
   never overlap by construction. A frozen worker may still *believe* it holds an expired
   lease; that is allowed, as long as nothing it writes is accepted (2).
2. *No accepted write from a non-holder.* Every write to a leased job presents the lease token
   (checked on consecutive versions: the version after a Leased one carries that token in its
   fence); Succeeded is reached only from Leased, and its result names that lease's token,
   attempt and holder; a result never changes and a finished job never changes; each accepted
   result's token belongs to a lease that was observed or whose claim was logged; every stale
   write the run sent without a resourceVersion was refused, and no version carries one.
3. *No job lost.* Every submitted job exists at the end and ended (Succeeded, Failed or
   Cancelled) within the drain bound, with workers alive.
4. *One attempt per accepted result.* At most one attempt per job was told its result was
   accepted (the workers' `completed` events logged before the final state was read), and it
   is the accepted one; the result names that attempt's own transcript key (job UID, attempt,
   token), and the transcript read from the bucket was written by that attempt and holds every
   chunk exactly once, in order; each of its chunks was transcribed by an attempt up to the
   accepted one, and the accepted attempt transcribed no chunk twice. Every published copy
   (the Batch's index entry, the outputs) holds the bytes of the accepted result's object.
5. *A renewed lease is never reclaimed.* For each reclaim (fence `<token>/reclaim-<n>`), the
   lease's last renewal seen before it, against when the reclaim was seen: the renewal was
   applied at or after its `renewTime` (the holder's wall clock when it computed the write) and
   the reclaim before the recorder saw it, so `seen(reclaim) - renewTime < duration` proves
   the reclaim came less than a lease after a renewal was applied. One machine, one wall
   clock: these times compare. The check cannot false-alarm; it can miss a violation smaller
   than one request's latency plus the recorder's lag, and a renewal the recorder did not see.
6. *Batch items converge.* At the end, within one reconcile period (DESIGN §4), every item's
   phase in the Batch status (compressed ranges) is its job's; and no Batch version ever moves
   an item back out of completed, failed or cancelled (its job cannot leave those phases).
7. *Attempts are bounded.* In every version `attempts <= maxAttempts + min(releases,
   maxReleases)`, and every attempt that ended was counted once (`attempts == expiredLeases +
   releases + failures`, plus one while Leased or once Succeeded); poison jobs end Failed.
8. *Nothing referenced is deleted, nothing unreferenced is kept* (in the bucket's listing):
   every accepted transcript, its outputs, the published copies and the checkpoint chunks of
   jobs not ended exist at the end; and once the drain finished and the operators had a few
   sweeps to collect, no other object is left (see `objects`).
9. *No worker or operator ended on its own.* Every process ended because the run killed it,
   stopped it (SIGTERM) or it hit an armed crash point. A stopped process that does not exit
   with 0 is reported in the line, not counted here: it was asked to stop.
10. *The API server holds the ledger only*, loosely: no ConfigMap in the namespace holds the
   work (the operator's usage record, `recall-usage`, holds counts per day and a 9-byte mark of
   each job counted), and every job is under 4 KiB as the API server serves it.

And the reclaim delay (reported as 12, not a number of DESIGN §5): a worker killed while it held
a lease (by the run, or by itself at a crash point, timed when the run noticed) — its job must
be Queued again within `lease + 2 ticks` while the operator is up; when a leading operator or
the control plane was down meanwhile, within `lease + 2 ticks` of its coming back.

Measured and reported, not asserted: how far Batch items lag their jobs while the operator is
up, the reclaim margin of (5), how long the operators took to settle the bucket after the
drain, the largest job.
"""

from __future__ import annotations

from recall_dev.chaos.history import History
from recall_dev.chaos.invariants.batches import check_items, measure_item_lags
from recall_dev.chaos.invariants.jobs import check_attempts, check_lost
from recall_dev.chaos.invariants.leases import check_leases, check_probes
from recall_dev.chaos.invariants.numbers import count
from recall_dev.chaos.invariants.objects import check_ledger, check_objects
from recall_dev.chaos.invariants.processes import check_processes
from recall_dev.chaos.invariants.reclaims import check_kills, check_reclaims
from recall_dev.chaos.invariants.results import check_results
from recall_dev.chaos.invariants.verdict import (
    CARELESS,
    FORGED,
    NAMES,
    DrainTimeout,
    KillSample,
    Verdict,
    Violation,
)

__all__ = [
    "CARELESS",
    "FORGED",
    "NAMES",
    "DrainTimeout",
    "KillSample",
    "Verdict",
    "Violation",
    "check",
]


def check(h: History) -> Verdict:
    """Every check on `h`, then the numbers of the run."""
    verdict = Verdict()
    for job in h.jobs.values():
        check_leases(h, job, verdict)
        check_attempts(h, job, verdict)
    check_results(h, verdict)
    check_objects(h, verdict)
    check_ledger(h, verdict)
    check_probes(h, verdict)
    check_lost(h, verdict)
    check_reclaims(h, verdict)
    check_items(h, verdict)
    check_processes(h, verdict)
    check_kills(h, verdict)
    measure_item_lags(h, verdict)
    count(h, verdict)
    return verdict
