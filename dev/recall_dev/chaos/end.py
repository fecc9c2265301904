"""How a chaos run ends: the drain, the wait for the Batches and the bucket to settle, the
final state.

    drain(chaos, pending, say)      # phase 3 of `run`: until every job ended, or the deadline
    final = finish(chaos, say)      # phase 4: stop the workers, settle, stop the operators, read

Contract:
- `drain` ends no fault of its own making late: frozen processes are continued, due actions
  (continues, restarts, the ends of the store's faults) run at once, and the proxy is healed.
  It sets `chaos.drained` when every expected job has ended (checked every second, not while
  the control plane restarts), else, at the deadline, `chaos.not_ended` to the jobs that had
  not. After a finished drain it waits up to one reconcile period for the Batches
  (`chaos.converged`).
- `finish` stops the workers first (SIGTERM: nothing writes to the bucket any more), then,
  after a finished drain only, gives the operators `profile.settle_timeout` to publish every
  Succeeded job and collect every unreferenced object (`chaos.settled`: when they had); then
  stops the operators and reads the final state. Every process is stopped before the read, so
  the final state is the state at the end: no job completes after it, no event is logged
  after it. (Reading it while the processes still ran, after a drain that ran out of time,
  is what made jobs that completed during the read look like results logged but never
  accepted.)
"""

from __future__ import annotations

import heapq
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from recall.resources import BATCH_PLURAL, JOB_PLURAL
from recall_dev.chaos.final import converged, list_objects, not_ended, read_final, unsettled
from recall_dev.chaos.history import Final

if TYPE_CHECKING:
    from recall_dev.chaos.run import Chaos

# How long an operator may take to exit after SIGTERM before it is killed (and reported in the
# line as a stop that was not clean); the workers get `Fleet.stop`'s default.
OPERATOR_GRACE = 5.0


def drain(chaos: Chaos, pending: list[Any], say: Callable[[str], None]) -> None:
    """Phase 3; see the module contract."""
    fleet, api = chaos.fleet, chaos.api
    assert fleet is not None and api is not None
    for proc in fleet.procs:
        if proc.alive and proc.frozen:
            fleet.send(proc, signal.SIGCONT)
    for d in chaos.due:  # continue and restart at once what was due later
        d.at = min(d.at, time.time())
    heapq.heapify(chaos.due)
    chaos.housekeeping()
    chaos.store.heal()
    deadline = chaos.faults_ended + chaos.profile.drain_timeout
    last_check = 0.0
    last_say = time.time()
    while time.time() < deadline:
        pending = chaos.submit(pending)
        chaos.housekeeping()
        for proc in fleet.procs:
            if proc.alive and proc.stopped_at is not None:
                fleet.send(proc, signal.SIGCONT)
        now = time.time()
        if now - last_check > 1.0 and not chaos.restarting:
            last_check = now
            if not pending and not_ended(api, chaos.namespace, chaos.expected) == []:
                chaos.drained = now
                break
        if now - last_say > 15:
            last_say = now
            say(f"draining: {chaos.progress()}")
        time.sleep(0.05)
    if chaos.drained is None:
        left = not_ended(api, chaos.namespace, chaos.expected)
        if left == [] and not pending:
            chaos.drained = time.time()  # ended since the last check
        else:
            chaos.not_ended = sorted(chaos.expected) if left is None else left
            say(f"drain timed out: {len(chaos.not_ended)} jobs not ended ({chaos.progress()})")
            return
    # DESIGN §4: every item matches its job within one reconcile period
    p = chaos.profile
    chaos.converged = wait_converged(chaos, timeout=p.reconcile_interval + 4 * p.tick_seconds)


def wait_converged(chaos: Chaos, timeout: float) -> float | None:
    """Until every Batch item shows its job's phase, or `timeout`; returns when (wall time),
    None if they did not."""
    assert chaos.api is not None
    deadline = time.time() + timeout
    while time.time() < deadline:
        chaos.housekeeping()
        try:
            listed = list_objects(chaos.api, chaos.namespace, JOB_PLURAL)
            jobs = {o["metadata"]["name"]: o for o in listed}
            batches = list_objects(chaos.api, chaos.namespace, BATCH_PLURAL)
        except Exception:
            time.sleep(0.2)
            continue
        if converged(jobs, batches):
            return time.time()
        time.sleep(0.2)
    return None


def wait_settled(chaos: Chaos, timeout: float, say: Callable[[str], None]) -> float | None:
    """Until the operators published every Succeeded job and nothing unreferenced is left in
    the bucket, or `timeout`; returns when (wall time), None if they did not."""
    assert chaos.api is not None
    deadline = time.time() + timeout
    waiting: str | None = "not looked yet"
    while time.time() < deadline:
        chaos.housekeeping()  # an operator that crashed at a fault point is started again
        try:
            waiting = unsettled(chaos.api, chaos.namespace, chaos.store.bucket)
        except Exception as e:
            waiting = f"{type(e).__name__}: {e}"[:200]
        if waiting is None:
            return time.time()
        time.sleep(0.5)
    say(f"the bucket did not settle within {timeout:.0f} s: {waiting}")
    return None


def finish(chaos: Chaos, say: Callable[[str], None]) -> Final:
    """Phase 4; see the module contract."""
    fleet, api = chaos.fleet, chaos.api
    assert fleet is not None and api is not None
    chaos.ending = True
    fleet.stop("worker")
    if chaos.drained is not None:
        chaos.settled = wait_settled(chaos, chaos.profile.settle_timeout, say)
    fleet.stop("operator", grace=OPERATOR_GRACE)
    say(f"every process stopped; reading the final state ({chaos.progress()})")
    return read_final(api, chaos.namespace, chaos.store.bucket)
