"""The built-in autoscaler of the worker Deployment: read, decide (`scaling.decide`), apply.

Inputs of one round (`observe`): the Deployment's scale subresource and rollout state, the HPAs
and ScaledObjects of its namespace, its pods (by the scale's selector), the pool's live
registrations, the busy workers (holding or offered a job), the outstanding work, and whether
the operator's views are current.

Writes of one round, in this order, each only while this replica leads (`leadership.holds()`,
checked before every write): pod annotations, drain requests cancelled and made (each
registration Lease replaced at the resourceVersion read), the scale write, then the status
annotation `recall.dev/autoscaler` on the Deployment, and an Event when the decision changed.

Fencing: the scale write carries the resourceVersion of the Deployment read in the same round,
so a write based on a stale read is refused (409) and the next round reads again. A replica's
first write in a term is the status annotation, which moves that resourceVersion: a deposed
leader's scale write, read before the takeover, cannot land after it. A new term also restarts
the cooldown (no scale-down before a new leader has watched for a whole cooldown).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from recall.base import log, metrics
from recall.base.clock import SYSTEM, Clock
from recall.kube import Api, ApiError, Conflict, NotFound, ObjectRef, RawObject
from recall.operator.peers.leader import Leadership, Sole
from recall.operator.peers.registry import Registry
from recall.operator.scaling.decide import (
    DELETION_COST,
    SAFE_TO_EVICT,
    Decision,
    Inputs,
    PodView,
    Policy,
    Reason,
    WorkerView,
    decide,
)
from recall.operator.scaling.workload import Workload
from recall.protocol.workers import lease_name, read, with_drain
from recall.resources import DEFAULT_POOL, label_value

_log = log.get("scaler")
STATUS_ANNOTATION = "recall.dev/autoscaler"
HELD = (Reason.STALE, Reason.REFUSED, Reason.MISSING)


@dataclass(frozen=True)
class Target:
    """The worker Deployment to scale: its namespace, its pool and the pool's engine."""

    namespace: str
    deployment: str
    engine: str
    pool: str = DEFAULT_POOL


@dataclass
class Sources:
    """What the scaler reads of the operator's own views."""

    workload: Workload
    registry: Registry
    busy: Callable[[], set[tuple[str, str]]] = set
    stale: Callable[[], str | None] = lambda: None  # why the views are not current, or None


@dataclass
class Report:
    """What one round did."""

    decision: Decision | None = None
    scaled: int | None = None  # the count written
    conflict: bool = False  # the scale write was refused: the Deployment changed
    drained: list[str] = field(default_factory=list)  # workers asked to drain
    errors: list[str] = field(default_factory=list)


def pod_view(raw: RawObject) -> PodView:
    meta, status = raw.get("metadata") or {}, raw.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    annotations = meta.get("annotations") or {}
    return PodView(
        name=str(meta.get("name") or ""),
        ready=ready,
        terminating=bool(meta.get("deletionTimestamp")),
        annotations=tuple(
            (k, str(v)) for k, v in annotations.items() if k in (SAFE_TO_EVICT, DELETION_COST)
        ),
    )


def rolling(deployment: RawObject) -> bool:
    """A rollout is in progress: a new generation not yet observed, or pods of an old
    template left (the Deployment controller then spreads a scale-down over ReplicaSets)."""
    meta, status = deployment.get("metadata") or {}, deployment.get("status") or {}
    if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 0):
        return True
    return int(status.get("replicas") or 0) > int(status.get("updatedReplicas") or 0)


class Scaler:
    """One worker Deployment's built-in autoscaler (only the leader acts)."""

    def __init__(
        self,
        store: Api,
        target: Target,
        policy: Policy,
        sources: Sources,
        leadership: Leadership | None = None,
        *,
        identity: str = "",
        interval: float = 2.0,
        clock: Clock = SYSTEM,
    ) -> None:
        self.store = store
        self.target = target
        self.policy = policy
        self.sources = sources
        self.leadership: Leadership = leadership or Sole()
        self.identity = identity
        self.interval = interval
        self.clock = clock
        self.below_since: float | None = None
        self._fenced = False  # this term's first write (the status annotation) is done
        self._written: dict[str, object] | None = None  # the status last written
        self._asked_at: dict[tuple[str, str], float] = {}  # (worker, request) → first seen
        self._resource_version: str | None = None  # of the Deployment, as read this round
        self._ref = ObjectRef("Deployment", target.namespace, target.deployment, None, "apps/v1")

    # -- the loop ----------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """A round every `interval` seconds until `stop`. Never raises."""
        while not self.clock.wait(stop, self.interval):
            try:
                self.run_once()
            except Exception:
                _log.exception("scale_failed", deployment=self.target.deployment)

    def run_once(self) -> Report:
        """Read, decide and apply once. A replica that does not lead only forgets its term."""
        if not self.leadership.holds():
            self._fenced, self.below_since, self._written = False, None, None
            return Report()
        inputs, deployment = self.observe()
        decision = decide(inputs, self.clock.monotonic())
        report = self.apply(decision, deployment)
        self.below_since = decision.below_since
        self._publish(decision, report)
        return report

    # -- inputs ------------------------------------------------------------------------------

    def observe(self) -> tuple[Inputs, RawObject | None]:
        """The inputs of one decision, and the Deployment as read (None if missing)."""
        t = self.target
        work = self.sources.workload.of(t.namespace, t.engine, t.pool)
        stale = self.sources.stale()
        try:
            scale = self.store.get_scale(t.namespace, t.deployment)
            deployment = self.store.get_deployment(t.namespace, t.deployment)
            if scale is None or deployment is None:
                return Inputs(self.policy, work, None), None
            refused_by = next(
                (
                    f"{a.kind} {a.name}"
                    for a in self.store.list_autoscalers(t.namespace)
                    if a.target_kind == "Deployment" and a.target_name == t.deployment
                ),
                None,
            )
            pods = tuple(pod_view(p) for p in self.store.list_pods(t.namespace, scale.selector))
        except ApiError as e:
            return Inputs(self.policy, work, None, stale=f"cannot read: {e.message}"), None
        self._resource_version = scale.resource_version
        inputs = Inputs(
            self.policy,
            work,
            scale.replicas,
            pods=pods,
            workers=self._workers(),
            busy=frozenset(w for ns, w in self.sources.busy() if ns == t.namespace),
            rollout=rolling(deployment),
            stale=stale,
            refused_by=refused_by,
            below_since=self.below_since,
        )
        return inputs, deployment

    def _workers(self) -> tuple[WorkerView, ...]:
        now = self.clock.monotonic()
        engine = label_value(self.target.engine)
        seen = [
            s
            for s in self.sources.registry.alive(now)
            if s.namespace == self.target.namespace
            and s.engine == engine
            and s.pool == self.target.pool
        ]
        asked = {(s.worker, s.drain) for s in seen if s.drain and not s.answered}
        self._asked_at = {k: self._asked_at.get(k, now) for k in asked}
        waited = {worker: now - at for (worker, _), at in self._asked_at.items()}
        return tuple(
            WorkerView(
                name=s.worker,
                state=s.state,
                drain=s.drain,
                drained=s.drained,
                refused=s.refused,
                waited=waited.get(s.worker, 0.0),
                patience=2 * s.duration,
            )
            for s in seen
        )

    # -- writes ------------------------------------------------------------------------------

    def apply(self, d: Decision, deployment: RawObject | None) -> Report:
        """The writes of decision `d`, in order; each only while this replica leads."""
        report = Report(decision=d)
        if deployment is None or d.reason is Reason.MISSING:
            return report
        if not self._fenced:
            # The term's first write moves the Deployment's resourceVersion (see the module).
            if not self._status(d, deployment, report, force=True):
                return report
            self._fenced = True
            return report  # decide again on what this write changed
        for pod, key, value in d.annotate:
            if self._may(report):
                try:
                    self.store.patch_pod_annotations(self.target.namespace, pod, {key: value})
                except ApiError as e:
                    report.errors.append(e.message)
        for worker in d.undrain:
            if self._may(report) and self._request(worker, None, report):
                metrics.DRAINS.labels(outcome="cancelled").inc()
        for worker in d.drain:
            request = uuid.uuid4().hex[:12]
            if self._may(report) and self._request(worker, request, report):
                report.drained.append(worker)
                metrics.DRAINS.labels(outcome="requested").inc()
        if report.drained:
            self._event(
                "Normal", "Draining", f"asked {', '.join(report.drained)} to drain: {d.message}"
            )
        if d.replicas is not None and self._may(report):
            self._scale(d, report)
        self._status(d, deployment, report)
        return report

    def _may(self, report: Report) -> bool:
        if self.leadership.holds():
            return True
        report.errors.append("not the leader any more")
        return False

    def _request(self, worker: str, request: str | None, report: Report) -> bool:
        """Set (or, with None, remove) the drain request on `worker`'s registration Lease."""
        ns = self.target.namespace
        try:
            lease = self.store.get_lease(ns, lease_name(worker))
            if lease is None or read(lease).drain == request:
                return False
            self.store.replace_lease(ns, lease_name(worker), with_drain(lease, request))
        except (Conflict, NotFound):
            return False  # the worker renewed meanwhile: the next round decides again
        except ApiError as e:
            report.errors.append(e.message)
            return False
        event = "drain_requested" if request else "drain_cancelled"
        _log.info(event, worker=worker, request=request, deployment=self.target.deployment)
        return True

    def _scale(self, d: Decision, report: Report) -> None:
        assert d.replicas is not None and d.current is not None
        t = self.target
        try:
            self.store.patch_scale(t.namespace, t.deployment, d.replicas, self._resource_version)
        except Conflict:
            report.conflict = True
            _log.info("scale_conflict", deployment=t.deployment, replicas=d.replicas)
            return
        except ApiError as e:
            report.errors.append(e.message)
            return
        report.scaled = d.replicas
        direction = "up" if d.replicas > d.current else "down"
        metrics.SCALINGS.labels(direction=direction).inc()
        metrics.DRAINS.labels(outcome="drained").inc(len(d.removed))
        _log.info(
            "scaled",
            deployment=t.deployment,
            namespace=t.namespace,
            reason=str(d.reason),
            current=d.current,
            replicas=d.replicas,
            desired=d.desired,
            removed=list(d.removed),
        )
        self._event("Normal", str(d.reason), d.message)

    def _status(
        self, d: Decision, deployment: RawObject, report: Report, *, force: bool = False
    ) -> bool:
        """Write the status annotation when it changed (or `force`); an Event with it when
        the decision's reason changed to one that holds. Returns whether it is in place."""
        current = report.scaled if report.scaled is not None else d.current
        able = d.reason not in HELD
        status: dict[str, object] = {
            "mode": "builtin",
            "leader": self.identity,
            "desired": d.desired,
            "current": current,
            "draining": d.draining,
            "reason": str(d.reason),
            "message": d.message,
            "conditions": [
                {
                    "type": "AbleToScale",
                    "status": "True" if able else "False",
                    "reason": str(d.reason),
                    "message": d.message,
                }
            ],
        }
        key = {k: v for k, v in status.items() if k not in ("message", "conditions")}
        if not force and self._written == key:
            return True
        if not self._may(report):
            return False
        status["time"] = self.clock.now().isoformat(timespec="seconds")
        t = self.target
        try:
            self.store.patch_deployment_annotations(
                t.namespace, t.deployment, {STATUS_ANNOTATION: json.dumps(status)}
            )
        except ApiError as e:
            report.errors.append(e.message)
            return False
        previous = None if self._written is None else self._written.get("reason")
        self._written = key
        self._ref = ObjectRef(
            "Deployment",
            t.namespace,
            t.deployment,
            (deployment.get("metadata") or {}).get("uid"),
            "apps/v1",
        )
        if not able and previous != str(d.reason) and d.reason is not Reason.MISSING:
            kind = "ScalingRefused" if d.reason is Reason.REFUSED else "ScalingHeld"
            _log.warning("scaling_held", deployment=t.deployment, reason=str(d.reason))
            self._event("Warning", kind, d.message)
        return True

    def _event(self, type_: str, reason: str, message: str) -> None:
        try:
            self.store.post_event(self._ref, type_, reason, message)
        except ApiError as e:
            _log.warning("event_failed", reason=reason, error=e.message[:200])

    def _publish(self, d: Decision, report: Report) -> None:
        pool = self.target.pool
        metrics.WORKERS_DESIRED.labels(pool=pool).set(d.desired)
        current = report.scaled if report.scaled is not None else d.current
        metrics.WORKERS_CURRENT.labels(pool=pool).set(current or 0)
        metrics.WORKERS_DRAINING.labels(pool=pool).set(d.draining)
        work = self.sources.workload.of(self.target.namespace, self.target.engine, pool)
        metrics.OUTSTANDING.labels(pool=pool, phase="Queued").set(work.queued)
        metrics.OUTSTANDING.labels(pool=pool, phase="Leased").set(work.leased)
        for reason in Reason:
            metrics.SCALING_REASON.labels(pool=pool, reason=str(reason)).set(
                1 if reason is d.reason else 0
            )
