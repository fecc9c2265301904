"""One chaos run: a local control plane, an S3 server, two operators, a fleet of simulated
workers, a few hundred jobs, and faults until the time is up; then a drain, the final state,
and the checks.

    outcome = run(seed=1, profile=PROFILES["short"], workdir=Path(...))
    print(outcome.line)              # the one line
    outcome.verdict.violations       # every invariant violation, with its evidence

Phases:
1. start etcd + kube-apiserver (no controller manager: nothing here needs it), install the
   CRDs, start SeaweedFS with the run's bucket and the fault proxy in front of it
   (`bucket.RunStore`), the recorders, two operators with leader election (admin identity,
   a sweep every `profile.sweep_seconds`; some armed to crash between a publish's copies and
   its record) and `profile.workers` workers (worker identity; some with a fault point armed
   through `RECALL_FAULT`);
2. for `profile.duration` seconds: submit the workload in waves, and inject faults at
   exponential intervals — SIGKILL a worker (a replacement starts), SIGSTOP a worker and
   continue it later (some after their lease), SIGTERM a worker (it releases), SIGKILL or
   SIGSTOP an operator (mostly the leader), write with a stale token and no resourceVersion,
   slow the store, lose PUT answers, take the store down; restart etcd, kube-apiserver and the
   S3 server at fixed points; continue workers that froze themselves at a fault point;
3. drain: no new faults, everything continued and restarted, the store's faults ended; wait
   until every job ended (`profile.drain_timeout`; the jobs left at its deadline are noted)
   and the Batches converged;
4. stop the workers; give the operators `profile.settle_timeout` to publish every result and
   collect everything unreferenced (only after a finished drain); stop the operators; then read
   the final state (nothing runs any more, so nothing changes after it or is logged after
   it), stop everything, load the history and check it (`invariants.check`).

This module drives the phases; the faults are `faults`, the server restarts `servers`, the
reading of the state at the end `final`, and the line and report `outcome`.

Everything started here is stopped in `finally`, also when the run fails; the S3 server's data
goes with it (its log stays in the work directory). The servers are started from the calling
thread and restarted from keeper threads (one for the control plane, one for the S3 server);
all of them outlive the servers (PR_SET_PDEATHSIG is per thread).
"""

from __future__ import annotations

import heapq
import itertools
import random
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from recall.kube.client import load_api_client
from recall.resources import BATCH_PLURAL, GROUP, JOB_PLURAL, VERSION
from recall_dev.chaos.bucket import RunStore
from recall_dev.chaos.end import drain, finish
from recall_dev.chaos.faults import WORKER_FAULTS, Injector
from recall_dev.chaos.fleet import CRASH_POINT, Fleet, Process, environment
from recall_dev.chaos.history import Fault, Final, History, ProcessEnd, load, save_run
from recall_dev.chaos.invariants import check
from recall_dev.chaos.outcome import Outcome
from recall_dev.chaos.recorder import JobRecorder, LeaderTracker
from recall_dev.chaos.servers import (
    STORE_SERVER,
    ServerKeeper,
    restart_schedule,
    servers_ready,
    writable,
)
from recall_dev.chaos.workload import Profile, Wave, expected_jobs, plan_workload
from recall_dev.cluster import ControlPlane
from recall_dev.crds import install_crds

NAMESPACE = "chaos"
LEADER_LEASE = "recall-operator"
PUBLISH_CRASH = 0.3  # the share of operator starts armed to crash in the middle of a publish


@dataclass(order=True)
class _Due:
    at: float
    seq: int
    what: str = field(compare=False)
    action: Callable[[], None] = field(compare=False)


class Chaos:
    """The run's state; `run()` drives it."""

    def __init__(self, seed: int, profile: Profile, workdir: Path) -> None:
        self.seed = seed
        self.namespace = NAMESPACE
        self.profile = profile
        self.workdir = workdir
        self.rng = random.Random(seed)
        self.created = time.time()
        self.waves: list[Wave] = plan_workload(profile, self.rng)
        self.expected = expected_jobs(self.waves)
        self.cp = ControlPlane(workdir=workdir / "control-plane", controller_manager=False)
        self.store = RunStore(workdir / "objstore")
        self.faults: list[dict[str, Any]] = []
        self.due: list[_Due] = []
        self._seq = itertools.count()
        self.started = 0.0
        self.faults_ended = 0.0
        self.drained: float | None = None
        self.converged: float | None = None
        self.draining = False
        self.ending = False  # the workers are stopped: none is replaced
        self.not_ended: list[str] = []
        self.settled: float | None = None
        self.armed: set[str] = set()  # jobs an operator was armed to crash publishing
        self.servers: ServerKeeper | None = None
        self.store_keeper: ServerKeeper | None = None
        self.fleet: Fleet | None = None
        self.recorder: JobRecorder | None = None
        self.batch_recorder: JobRecorder | None = None
        self.tracker: LeaderTracker | None = None
        self.api: client.ApiClient | None = None
        self.injector: Injector | None = None
        self.slots: dict[str, Process | None] = {"a": None, "b": None}

    # -- set-up ------------------------------------------------------------------------------

    def start(self) -> None:
        self.cp.start(timeout=180)
        self.servers = ServerKeeper(
            lambda name, sig: self.cp.restart(name, sig=sig, wait=False),
            lambda _name, _detail: self.back(),
        )
        self.store.start()
        self.store_keeper = ServerKeeper(
            lambda _name, sig: self.store.restart(sig),
            lambda _name, detail: self.store.back(detail),
            name="chaos-store",
        )
        install_crds(str(self.cp.kubeconfig))
        self.api = load_api_client(self.cp.kubeconfig, pool_size=4)
        client.CoreV1Api(self.api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE))
        )
        env = environment(self.cp.env(), self.profile, self.workdir / "engine.jsonl")
        roles = {"worker": self.store.env("worker"), "operator": self.store.env("operator")}
        self.fleet = Fleet(env, self.workdir / "logs", NAMESPACE, roles)
        self.recorder = JobRecorder(self.cp.kubeconfig, NAMESPACE, self.workdir / "jobs.jsonl")
        self.recorder.start()
        self.batch_recorder = JobRecorder(
            self.cp.kubeconfig, NAMESPACE, self.workdir / "batches.jsonl", BATCH_PLURAL
        )
        self.batch_recorder.start()
        self.tracker = LeaderTracker(
            self.cp.kubeconfig, NAMESPACE, LEADER_LEASE, self.workdir / "leaders.jsonl"
        )
        self.tracker.start()
        self.injector = Injector(
            rng=self.rng,
            fleet=self.fleet,
            recorder=self.recorder,
            tracker=self.tracker,
            api=self.api,
            namespace=NAMESPACE,
            operators=self.slots,
            later=self.later,
            leader_lease=self.profile.leader_lease,
            store=self.store,
            log=self.faults,
        )
        for slot in self.slots:
            self.restart_op(slot)
        for _ in range(self.profile.workers):
            self.spawn_worker()

    def spawn_worker(self) -> None:
        assert self.fleet is not None
        if self.ending:
            return
        fault = None if self.draining else self.rng.choice(WORKER_FAULTS)
        grace = self.rng.choice([0.0, 0.5, 1.0, 3.0])
        self.fleet.worker({"RECALL_WORKER_GRACE_SECONDS": str(grace)}, fault)

    # -- the loop ----------------------------------------------------------------------------

    def later(self, delay: float, what: str, action: Callable[[], None]) -> None:
        heapq.heappush(self.due, _Due(time.time() + delay, next(self._seq), what, action))

    def run(self, say: Callable[[str], None]) -> None:
        assert self.injector is not None
        p = self.profile
        self.started = time.time()
        end = self.started + p.duration
        next_fault = self.started + self.rng.expovariate(1 / p.fault_interval)
        restarts = restart_schedule(p, self.rng, self.started)
        pending: list[Any] = []
        waves = list(self.waves)
        last_say = 0.0
        while time.time() < end:
            now = time.time()
            while waves and now >= self.started + waves[0].at:
                pending.extend(waves.pop(0).submissions)
            pending = self.submit(pending)
            self.housekeeping()
            if restarts and now >= restarts[0][0] and not self.keeper(restarts[0][1]).busy:
                self.restart_server(restarts.pop(0)[1])
            if now >= next_fault:
                self.injector.inject()
                next_fault = now + self.rng.expovariate(1 / p.fault_interval)
            if now - last_say > 15:
                last_say = now
                say(self.progress())
            time.sleep(0.05)
        self.faults_ended = time.time()
        self.draining = True
        say(f"faults over; draining ({self.progress()})")
        drain(self, pending, say)

    def progress(self) -> str:
        assert self.recorder is not None
        phases: dict[str, int] = {}
        for obj in self.recorder.current().values():
            phase = obj["status"].get("phase") or "Queued"
            phases[phase] = phases.get(phase, 0) + 1
        return (
            f"+{time.time() - self.started:.0f} s, {len(self.faults)} faults, "
            f"jobs {dict(sorted(phases.items()))}"
        )

    def housekeeping(self) -> None:
        """Due actions, ended processes (replaced), processes frozen at a fault point
        (continued later), and the end of a server restart."""
        assert self.fleet is not None and self.injector is not None
        now = time.time()
        while self.due and self.due[0].at <= now:
            heapq.heappop(self.due).action()
        for proc in self.fleet.poll():
            if proc.role == "worker":
                if proc.end_reason == CRASH_POINT:
                    # It killed itself at a fault point, by now (no earlier than its last log
                    # line): its leases count for the kill -> Queued delay too.
                    leases = self.injector.holders().get(proc.name, [])
                    self.injector.note("worker-crash", proc.name, {"leases": leases})
                self.later(self.rng.uniform(0.2, 1.5), "replace", self.spawn_worker)
            elif self.slots.get(proc.name.split("-")[1]) is proc:
                slot = proc.name.split("-")[1]
                if proc.end_reason == CRASH_POINT:  # noticed now: no later than it happened
                    leader = self.injector.is_leader(proc)
                    self.injector.note("operator-crash", proc.name, {"leader": leader})
                self.later(self.rng.uniform(0.5, 3.0), "restart", partial(self.restart_op, slot))
        for proc in self.fleet.self_paused():
            delay = 0.5 if self.draining else self.rng.uniform(0.5, 8.0)
            self.later(delay, "continue", partial(self.injector.resume, proc))

    def restart_op(self, slot: str) -> None:
        """A new operator in `slot`; while faults go on, some are armed to crash between the
        copies of one job's publish and its record (a job no operator was armed for yet)."""
        assert self.fleet is not None
        fault = None
        left = sorted(set(self.expected) - self.armed)
        if not self.draining and left and self.rng.random() < PUBLISH_CRASH:
            job = self.rng.choice(left)
            self.armed.add(job)
            fault = f"operator-after-publish:{job}"
        self.slots[slot] = self.fleet.operator(slot, {}, fault)

    # -- server restarts ---------------------------------------------------------------------

    def back(self) -> bool:
        """etcd healthy, kube-apiserver ready, and a write accepted."""
        if not servers_ready(self.cp):
            return False
        assert self.api is not None
        return writable(self.api, NAMESPACE)

    @property
    def restarting(self) -> bool:
        return self.servers is not None and self.servers.busy

    def keeper(self, name: str) -> ServerKeeper:
        keeper = self.store_keeper if name == STORE_SERVER else self.servers
        assert keeper is not None
        return keeper

    def restart_server(self, name: str) -> None:
        """Restart `name` (etcd, kube-apiserver, or the S3 server) on its keeper's thread."""
        assert self.injector is not None
        sig = self.rng.choice([signal.SIGKILL, signal.SIGTERM])
        kind = "store-restart" if name == STORE_SERVER else "control-plane-restart"
        record = self.injector.note(kind, name, {"signal": sig.name})
        self.keeper(name).restart(name, sig, record["detail"])

    # -- submissions -------------------------------------------------------------------------

    def submit(self, pending: list[Any]) -> list[Any]:
        """Create what is pending; what the API server refuses for now stays pending."""
        assert self.api is not None
        if not pending or self.restarting:
            return pending
        custom = client.CustomObjectsApi(self.api)
        left = []
        for i, sub in enumerate(pending):
            plural = BATCH_PLURAL if sub.kind == "Batch" else JOB_PLURAL
            try:
                custom.create_namespaced_custom_object(
                    GROUP, VERSION, NAMESPACE, plural, sub.manifest, _request_timeout=5
                )
            except ApiException as e:
                if e.status != 409:  # 409: created by an earlier try whose answer was lost
                    left.append(sub)
            except Exception:
                return left + pending[i:]
        return left

    def history(self, final: Final) -> History:
        """Everything recorded, with the final state: saved in the work directory, and loaded
        back from there (so a finished run can be checked again: `history.load`)."""
        assert self.fleet is not None
        processes = [
            ProcessEnd(
                p.name, p.role, p.started, p.fault, p.ended, p.end_reason, p.returncode, p.tail(15)
            )
            for p in self.fleet.procs
        ]
        faults = [Fault(f["t"], f["kind"], f["target"], f["detail"]) for f in self.faults]
        skeleton = History(
            jobs={},
            relists=[],
            logs=[],
            self_faults=[],
            engine=[],
            faults=faults,
            leaders=[],
            processes=processes,
            final=final,
            expected=dict(self.expected),
            started=self.started,
            faults_ended=self.faults_ended,
            drained=self.drained,
            tick=self.profile.tick_seconds,
            converged=self.converged,
            slack=self.profile.reclaim_slack,
            seed=self.seed,
            profile=self.profile.name,
            seconds=time.time() - self.created,
            not_ended=self.not_ended,
            settled=self.settled,
            settle_timeout=self.profile.settle_timeout,
            store_requests=self.store.stats(),
        )
        save_run(skeleton, self.workdir)
        return load(self.workdir)

    def stop(self) -> None:
        """Stop everything this run started; never raises."""
        steps: list[Callable[[], object]] = [self.cp.stop, self.store.stop]
        if self.servers is not None:
            steps.append(self.servers.close)
        if self.store_keeper is not None:
            steps.append(self.store_keeper.close)
        if self.tracker is not None:
            steps.insert(0, self.tracker.stop)
        if self.recorder is not None:
            steps.insert(0, self.recorder.stop)
        if self.batch_recorder is not None:
            steps.insert(0, self.batch_recorder.stop)
        if self.fleet is not None:
            steps.insert(0, self.fleet.stop_all)
        for step in steps:
            try:
                step()
            except Exception as e:  # keep stopping the rest
                print(f"chaos: stopping failed: {e}")
        shutil.rmtree(self.workdir / "control-plane" / "etcd", ignore_errors=True)


def run(
    seed: int,
    profile: Profile,
    workdir: Path,
    *,
    say: Callable[[str], None] = lambda _m: None,
) -> Outcome:
    """One chaos run in `workdir` (its records and logs stay there); see the module doc."""
    workdir.mkdir(parents=True, exist_ok=True)
    chaos = Chaos(seed, profile, workdir)
    try:
        say(f"chaos seed={seed} {profile.name}: starting the control plane and the S3 server")
        chaos.start()
        chaos.run(say)
        final = finish(chaos, say)
    finally:
        chaos.stop()
    history = chaos.history(final)
    outcome = Outcome(check(history), history, workdir)
    (workdir / "verdict.txt").write_text(outcome.line + "\n" + outcome.report(10_000) + "\n")
    return outcome
