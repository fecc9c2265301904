"""A worker fleet on the memory store, for the autoscaler's unit tests: the ReplicaSet, the
kubelet and the workers, played by hand on one clock.

- `ReplicaSet.reconcile()` does what the ReplicaSet controller does with the Deployment's
  count: creates pods, or removes the excess chosen as `kube-controller-manager` chooses
  (`ActivePodsWithRanks`: unassigned, then pending, then not ready, then the lowest
  pod-deletion-cost, then the newest), and sends each removed pod's worker its SIGTERM.
- `ReplicaSet.kubelet()` starts a pending pod's worker and reports its readiness (/readyz:
  started, not draining, not stopping), as the readiness probe does.
- `SimWorker` is a worker reduced to its protocol: it claims a Queued job itself (self-serve),
  within `Drain.turn()` held from the pick to the end of the work, as the real loop holds it;
  renews its registration with the real `Registration` (state and drain answer); completes the
  job when its time is up (a permanent `fail`: this fleet tests scaling, not results). A
  SIGTERM while it holds a job is what a scale-down must never cause: it is counted, then the
  job is released.
"""

from __future__ import annotations

import itertools
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from recall.operator.scaling.decide import DELETION_COST
from recall.protocol.workers import lease_name
from recall.resources import Phase, TranscriptionJob
from recall.worker.drain import Drain
from recall.worker.holder import LeaseHolder
from recall.worker.registration import Registration
from recall_dev.twin.api import MemoryApi
from recall_dev.twin.api import stamp as _now
from recall_dev.twin.clock import FakeClock
from tests.unit.fakes import NS

LABELS = {"app": "workers"}
DEPLOYMENT = "workers"


class SimWorker:
    def __init__(self, store: MemoryApi, clock: FakeClock, name: str) -> None:
        self.store = store
        self.clock = clock
        self.name = name
        self.drain = Drain(name, wait=0.0)
        self.registration = Registration(
            store, NS, name, "simulated", duration=15, period=5, drain=self.drain
        )
        self.holder: LeaseHolder | None = None
        self.turn: AbstractContextManager[bool] | None = None
        self.until = 0.0
        self.started = False
        self.stopping = False
        self.jobs_done = 0
        self.stopped_busy = 0  # SIGTERMs that found this worker holding a job

    def ready(self) -> bool:
        return self.started and not self.stopping and not self.drain.draining()

    def start(self) -> None:
        self.started = True
        self.registration.renew_once()

    def step(self, durations: dict[str, float]) -> None:
        if not self.started or self.stopping:
            return
        if self.holder is not None and self.clock.monotonic() >= self.until:
            self.holder.fail("Done", "simulated", permanent=True, backoff_base=1, backoff_cap=1)
            self.holder, self.jobs_done = None, self.jobs_done + 1
            self._end_turn()
        if self.holder is None:
            self.turn = self.drain.turn()
            if not self.turn.__enter__():
                self._end_turn()
                return
            job = self._pick()
            claimed = None if job is None else self._claim(job)
            if claimed is None:
                self._end_turn()
                return
            self.holder, self.until = claimed, self.clock.monotonic() + durations[claimed.name]

    def _pick(self) -> TranscriptionJob | None:
        page = self.store.list_jobs(NS)
        queued = [
            TranscriptionJob.from_api(o)
            for o in page.items
            if (o.get("status") or {}).get("phase") == "Queued"
        ]
        return min(queued, key=lambda j: j.name, default=None)

    def _claim(self, job: TranscriptionJob) -> LeaseHolder | None:
        h = LeaseHolder.claim(
            self.store, job, self.name, renew_deadline_fraction=0.6, clock=self.clock,
        )  # fmt: skip
        return h if isinstance(h, LeaseHolder) else None

    def _end_turn(self) -> None:
        if self.turn is not None:
            self.turn.__exit__(None, None, None)
            self.turn = None

    def sigterm(self) -> None:
        """The pod is being removed: stop (a busy worker would release its job)."""
        self.stopping = True
        if self.holder is not None:
            self.stopped_busy += 1
            self.holder.release()
            self.holder = None
            self._end_turn()
        self.store.delete_lease(NS, lease_name(self.name))


@dataclass
class ReplicaSet:
    store: MemoryApi
    clock: FakeClock
    workers: dict[str, SimWorker] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)
    _names: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _order: itertools.count[int] = field(default_factory=itertools.count)

    def replicas(self) -> int:
        deployment = self.store.get_deployment(NS, DEPLOYMENT)
        assert deployment is not None
        return int(deployment["spec"]["replicas"])

    def live(self) -> list[dict[str, object]]:
        return [
            p
            for p in self.store.list_pods(NS, "app=workers")
            if not p["metadata"].get("deletionTimestamp")
        ]

    def reconcile(self) -> None:
        live = self.live()
        want = self.replicas()
        for _ in range(want - len(live)):
            name = f"w{next(self._names)}"
            self.workers[name] = SimWorker(self.store, self.clock, name)
            self.store.put_pod(
                NS,
                {
                    "metadata": {"name": name, "labels": dict(LABELS), "order": next(self._order)},
                    "status": {"phase": "Pending", "conditions": []},
                },
            )
        if len(live) > want:
            for pod in sorted(live, key=_rank)[: len(live) - want]:
                name = str(pod["metadata"]["name"])  # type: ignore[index]
                pod["metadata"]["deletionTimestamp"] = _now()  # type: ignore[index]
                self.store.put_pod(NS, pod)
                self.workers[name].sigterm()
                self.removed.append(name)
        count = len(self.live())
        self.store.set_deployment_status(
            NS, DEPLOYMENT, {"replicas": count, "updatedReplicas": count}
        )

    def kubelet(self) -> None:
        for pod in self.store.list_pods(NS, "app=workers"):
            meta, status = pod["metadata"], pod["status"]
            worker = self.workers[meta["name"]]
            if meta.get("deletionTimestamp"):
                self.store.delete_pod(NS, meta["name"])
                continue
            if not worker.started:
                meta["nodeName"] = "node-1"
                worker.start()
            ready = worker.ready()
            status["phase"] = "Running"
            status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
            self.store.put_pod(NS, pod)

    def busy_removed(self) -> int:
        return sum(w.stopped_busy for w in self.workers.values())


def _rank(pod: dict[str, object]) -> tuple[int, int, int, int, int]:
    """The ReplicaSet's deletion order (smallest first), as `controller.ActivePodsWithRanks`."""
    meta, status = pod["metadata"], pod["status"]
    assert isinstance(meta, dict) and isinstance(status, dict)
    phase = {"Pending": 0, "Unknown": 1, "Running": 2}.get(str(status.get("phase")), 0)
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status["conditions"])
    cost = int((meta.get("annotations") or {}).get(DELETION_COST) or 0)
    return (1 if meta.get("nodeName") else 0, phase, int(ready), cost, -int(meta["order"]))


def phases(store: MemoryApi) -> dict[str, int]:
    counts: dict[str, int] = {}
    for o in store.list_jobs(NS).items:
        phase = (o.get("status") or {}).get("phase") or Phase.QUEUED.value
        counts[phase] = counts.get(phase, 0) + 1
    return counts
