"""The built-in autoscaler's decision: how many workers, and which idle ones go. Pure: `decide`
judges what `Scaler` (`recall.operator.scaling.scaler`) read.

The rules, in the order they are tried:

1. **Desired** is the pool's outstanding work (`recall.operator.scaling.workload`) over its
   slots per worker (`Policy.slots`), within `[minimum, maximum]`.
2. **Refused** when a HorizontalPodAutoscaler or a KEDA ScaledObject targets the Deployment:
   nothing is written, drains are cancelled; the Event and the condition say why.
3. **Stale inputs hold** (a view not current, a read that failed): nothing is written, the
   cooldown starts again. Never a blind drop to zero.
4. **Up at once**: desired above the Deployment's count → write desired.
5. **Down after a cooldown, a few at a time, drained first.** Only when fewer workers were
   wanted for `cooldown` seconds on the operator's clock, no rollout runs and no removal is
   pending (no more pods than the count), and by at most `step`:
   a. idle workers (ready pod, no job, no offer, registered idle, not asked) are asked to drain
      through their registration Lease (`recall.worker.drain`);
   b. a worker that answered `drained` and whose pod is seen unready may go, and so may an
      unready pod with no live registration that holds no job (pending, crash-looping, still
      starting: nothing to drain) while every other unready pod is drained: the count is
      lowered so that the ReplicaSet removes at most as many pods as there are such pods.
      It removes pending pods first, then unready ones, the lowest pod-deletion-cost first
      (drained pods get the lowest), so it removes no busy worker.
   A worker that answered `busy`, or did not answer within `patience`, is let go of (its
   request cancelled) and another idle one is asked.
6. Drains no scale-down needs (the work came back) are cancelled once no removal is pending.
7. With `mark_pods`, `cluster-autoscaler.kubernetes.io/safe-to-evict` is `"false"` on a busy
   worker's pod and `"true"` on an idle one's; a drained worker's pod gets the lowest
   `controller.kubernetes.io/pod-deletion-cost`.

Not decided here: who may write (the leader, `Scaler`), and the fence (the Deployment's
resourceVersion on the scale write). Not guaranteed: the cost annotation reaching the
ReplicaSet controller before it chooses (readiness already ranks drained pods first).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, replace

from recall.operator.scaling.workload import Outstanding
from recall.protocol.workers import BUSY, IDLE

SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
DRAINED_COST = str(-(2**31))  # the lowest an int32 allows


class Reason(enum.StrEnum):
    SCALED_UP = "ScaledUp"
    SCALED_DOWN = "ScaledDown"
    STEADY = "Steady"
    COOLDOWN = "Cooldown"
    DRAINING = "Draining"
    SETTLING = "Settling"
    ROLLOUT = "RolloutInProgress"
    STALE = "Stale"
    REFUSED = "Refused"
    MISSING = "DeploymentMissing"


@dataclass(frozen=True)
class Policy:
    minimum: int = 0
    maximum: int = 10
    cooldown: float = 300.0
    step: int = 2
    mark_pods: bool = True
    slots: int = 1  # leases one worker of the pool holds at once


@dataclass(frozen=True)
class PodView:
    """One pod of the Deployment: its name (the worker's identity) and what the kubelet says."""

    name: str
    ready: bool
    terminating: bool = False
    annotations: tuple[tuple[str, str], ...] = ()

    def annotation(self, key: str) -> str | None:
        return dict(self.annotations).get(key)


@dataclass(frozen=True)
class WorkerView:
    """A live worker's registration: its state and its answer to a drain request."""

    name: str
    state: str | None = None
    drain: str | None = None
    drained: bool = False
    refused: bool = False
    waited: float = 0.0  # seconds since this scaler first saw the unanswered request
    patience: float = 30.0  # how long an unanswered request stands

    @property
    def asked(self) -> bool:
        return self.drain is not None


@dataclass(frozen=True)
class Inputs:
    policy: Policy
    work: Outstanding
    replicas: int | None  # the Deployment's spec.replicas; None: no such Deployment
    pods: tuple[PodView, ...] = ()
    workers: tuple[WorkerView, ...] = ()
    busy: frozenset[str] = frozenset()  # workers holding a job or offered one
    rollout: bool = False
    stale: str | None = None  # why the inputs cannot be trusted
    refused_by: str | None = None  # the HPA or ScaledObject that scales the Deployment
    below_since: float | None = None  # since when fewer workers are wanted (our clock)


@dataclass(frozen=True)
class Decision:
    reason: Reason
    message: str
    desired: int
    current: int | None
    replicas: int | None = None  # write this count
    drain: tuple[str, ...] = ()  # ask these workers to drain
    undrain: tuple[str, ...] = ()  # cancel their drain requests
    annotate: tuple[tuple[str, str, str | None], ...] = ()  # (pod, key, value or None)
    below_since: float | None = None
    draining: int = 0  # workers asked to drain once this decision is applied
    removed: tuple[str, ...] = ()  # the drained workers a scale-down lets go


def desired_count(work: Outstanding, policy: Policy) -> int:
    """Workers for the outstanding jobs, `slots` of them to a worker, within min and max."""
    return max(policy.minimum, min(policy.maximum, math.ceil(work.total / max(1, policy.slots))))


@dataclass(frozen=True)
class _Fleet:
    live: dict[str, PodView]  # pods not terminating
    settled: bool  # no more pods than the count: the ReplicaSet removes nothing now
    asked: tuple[str, ...]  # workers with a drain request (and a live pod)
    drained: frozenset[str]  # ... that answered drained
    hopeless: tuple[str, ...]  # ... that answered busy, or did not answer in time


def _fleet(i: Inputs, current: int) -> _Fleet:
    live = {p.name: p for p in i.pods if not p.terminating}
    # A worker whose pod is terminating is left as it is: cancelling its drain could let it
    # claim a job in the moment before its SIGTERM.
    asked = [w for w in i.workers if w.asked and w.name in live]
    return _Fleet(
        live=live,
        settled=len(live) <= current,
        asked=tuple(w.name for w in asked),
        drained=frozenset(w.name for w in asked if w.drained),
        hopeless=tuple(
            w.name for w in asked if w.refused or (not w.drained and w.waited > w.patience)
        ),
    )


def _annotations(i: Inputs, f: _Fleet) -> tuple[tuple[str, str, str | None], ...]:
    """Pod annotation changes: safe-to-evict follows busy, the lowest deletion cost drained."""
    if not i.policy.mark_pods:
        return ()
    states = {w.name: w.state for w in i.workers}
    out: list[tuple[str, str, str | None]] = []
    for pod in f.live.values():
        busy = pod.name in i.busy or states.get(pod.name) == BUSY
        evict = "false" if busy else "true"
        if (busy or pod.name in states) and pod.annotation(SAFE_TO_EVICT) != evict:
            out.append((pod.name, SAFE_TO_EVICT, evict))
        cost = pod.annotation(DELETION_COST)
        if pod.name in f.drained and cost != DRAINED_COST:
            out.append((pod.name, DELETION_COST, DRAINED_COST))
        elif pod.name not in f.drained and cost == DRAINED_COST:
            out.append((pod.name, DELETION_COST, None))  # ours, and no longer drained
    return tuple(out)


def decide(i: Inputs, now: float) -> Decision:
    """The decision for `i` at `now` (the operator's monotonic clock)."""
    desired, current, work = desired_count(i.work, i.policy), i.replicas, i.work
    numbers = f"{work.total} outstanding jobs ({work.queued} queued, {work.leased} leased)"
    if current is None:
        return Decision(Reason.MISSING, "the worker Deployment does not exist", desired, None)
    f = _fleet(i, current)
    if i.refused_by:
        message = f"{i.refused_by} already scales the Deployment: the operator does not"
        return Decision(Reason.REFUSED, message, desired, current, undrain=f.asked)
    if i.stale:
        message = f"holding {current} workers: {i.stale}"
        return Decision(Reason.STALE, message, desired, current, draining=len(f.asked))
    base = Decision(Reason.STEADY, "", desired, current, annotate=_annotations(i, f))
    if desired >= current:
        undrain = f.asked if f.settled else f.hopeless
        if desired > current:
            message = f"{current} → {desired} workers: {numbers}"
            return _left(replace(base, reason=Reason.SCALED_UP, message=message,
                                 replicas=desired, undrain=undrain), f)  # fmt: skip
        return _left(replace(base, message=f"{current} workers: {numbers}", undrain=undrain), f)
    below_since = now if i.below_since is None else i.below_since
    base = replace(base, below_since=below_since, undrain=f.hopeless)
    waited = now - below_since
    if waited < i.policy.cooldown:
        message = (
            f"{current} workers, {desired} wanted ({numbers}): scaling down in "
            f"{i.policy.cooldown - waited:.0f} s (cooldown {i.policy.cooldown:.0f} s)"
        )
        undrain = f.asked if f.settled else f.hopeless
        return _left(replace(base, reason=Reason.COOLDOWN, message=message, undrain=undrain), f)
    if i.rollout:
        message = f"holding {current} workers until the rollout ends ({desired} wanted)"
        return _left(replace(base, reason=Reason.ROLLOUT, message=message), f)
    if not f.settled:
        message = f"{len(f.live)} pods for {current} workers: waiting for the last scale-down"
        return _left(replace(base, reason=Reason.SETTLING, message=message), f)
    return _left(_down(i, f, base, desired, current, numbers), f)


def _down(
    i: Inputs, f: _Fleet, base: Decision, desired: int, current: int, numbers: str
) -> Decision:
    """One step down (the cooldown passed, nothing pending): drain first, then lower the count
    so that the ReplicaSet removes no more pods than there are drained, unready ones and unready
    ones that never registered (`_vacant`)."""
    target = max(desired, current - i.policy.step)
    wanted = max(0, len(f.live) - target)  # pods this step removes
    usable = [n for n in f.asked if n not in f.hopeless]
    # furthest along first: drained and unready, drained, asked
    usable.sort(key=lambda n: (n not in f.drained or f.live[n].ready, n not in f.drained, n))
    # drained, unready, and holding nothing by the job view (a promise seen broken is not trusted)
    gone = [n for n in usable if n in f.drained and not f.live[n].ready and n not in i.busy]
    # then pods that never registered, in the places no drained worker takes
    vacant = _vacant(i, f)[: max(0, wanted - len(gone))]
    keep = wanted - len(vacant)  # places for asked workers
    surplus = tuple(usable[keep:])  # the work grew since they were asked
    usable = usable[:keep]
    removable = [n for n in usable if n in gone] + vacant
    candidates = sorted(
        w.name
        for w in i.workers
        if w.state == IDLE
        and not w.asked
        and w.name not in i.busy
        and w.name in f.live
        and f.live[w.name].ready
    )
    drain = tuple(candidates[: max(0, keep - len(usable))])
    undrain = f.hopeless + surplus
    replicas = max(target, len(f.live) - len(removable))
    if replicas < current:
        going = removable[: max(0, len(f.live) - replicas)]
        removed = tuple(n for n in going if n not in vacant)
        message = f"{current} → {replicas} workers: {numbers}; drained {', '.join(removed) or '-'}"
        if unregistered := [n for n in going if n in vacant]:
            message += f"; never registered {', '.join(unregistered)}"
        return replace(
            base, reason=Reason.SCALED_DOWN, message=message, replicas=replicas, drain=drain,
            undrain=undrain, removed=removed,
        )  # fmt: skip
    waiting = f"{keep - len(removable) + len(vacant)} of {keep} idle workers to drain"
    if not usable and not drain:
        waiting = "an idle worker to drain (none is: busy, starting, or not registered)"
    message = f"{current} workers, {desired} wanted ({numbers}): waiting for {waiting}"
    return replace(base, reason=Reason.DRAINING, message=message, drain=drain, undrain=undrain)


def _vacant(i: Inputs, f: _Fleet) -> list[str]:
    """Unready pods with no live registration that hold no job (pending, crash-looping, or
    starting): nothing to drain, and the ReplicaSet removes unready pods before ready ones. Only
    while every other unready pod is drained, so that it removes no busy worker in their place."""
    registered = {w.name for w in i.workers}
    unready = [n for n, p in f.live.items() if not p.ready]
    vacant = sorted(n for n in unready if n not in registered and n not in i.busy)
    if any(n not in vacant and (n not in f.drained or n in i.busy) for n in unready):
        return []
    return vacant


def _left(d: Decision, f: _Fleet) -> Decision:
    """`d` with the count of workers asked to drain once it is applied."""
    return replace(d, draining=len(set(f.asked) - set(d.undrain)) + len(d.drain))
