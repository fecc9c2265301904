"""One chaos run: a local control plane, two operators, a fleet of simulated workers, a few
hundred jobs, and faults until the time is up; then a drain, the final state, and the checks.

    outcome = run(seed=1, profile=PROFILES["short"], workdir=Path(...))
    print(outcome.line)              # the one line
    outcome.verdict.violations       # every invariant violation, with its evidence

Phases:
1. start etcd + kube-apiserver (no controller manager: nothing here needs it), install the
   CRDs, start the recorders, two operators with leader election and `profile.workers`
   workers (some with a fault point armed through `RECALL_FAULT`);
2. for `profile.duration` seconds: submit the workload in waves, and inject faults at
   exponential intervals — SIGKILL a worker (a replacement starts), SIGSTOP a worker and
   continue it later (some after their lease), SIGTERM a worker (it releases), SIGKILL or
   SIGSTOP an operator (mostly the leader), write with a stale token and no resourceVersion;
   restart etcd and kube-apiserver at fixed points; continue workers that froze themselves at a
   fault point;
3. drain: no new faults, everything continued and restarted; wait until every job ended
   (`profile.drain_timeout`) and the Batches converged;
4. record the final state and which processes ended how, stop everything, load the history and
   check it (`invariants.check`).

Everything started here is stopped in `finally`, also when the run fails. The servers are
started from the calling thread and restarted from a keeper thread; both outlive them
(PR_SET_PDEATHSIG is per thread).
"""

from __future__ import annotations

import heapq
import itertools
import json
import queue
import random
import shutil
import signal
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from recall.fanout import job_name
from recall.models import BATCH_PLURAL, GROUP, JOB_PLURAL, VERSION
from recall.store.kube import KubeStore, load_api_client
from recall.transcripts import LABEL_KIND, MANIFEST, TranscriptStore
from recall.transcripts.cleanup import references
from recall_dev.chaos.fleet import CRASH_POINT, Fleet, Process
from recall_dev.chaos.history import Fault, Final, History, ProcessEnd, load, save_run
from recall_dev.chaos.invariants import CARELESS, FORGED, NAMES, Verdict, check
from recall_dev.chaos.recorder import JobRecorder, LeaderTracker, compact
from recall_dev.chaos.workload import KIND_LABEL, Profile, Wave, plan_workload
from recall_dev.cluster import ControlPlane
from recall_dev.crds import install_crds

NAMESPACE = "chaos"
LEADER_LEASE = "recall-operator"
MERGE_PATCH = "application/merge-patch+json"

# Fault points a new worker may run with (see `recall.faults`); None: no fault point.
WORKER_FAULTS: list[str | None] = [
    None,
    None,
    None,
    None,
    None,
    "worker-pause-before-write:renew",
    "worker-pause-before-write:complete",
    "worker-pause-before-write:fail",
    "worker-pause-before-write:release",
    "lose-answer:claim",
    "lose-answer:renew",
    "lose-answer:complete",
    "lose-answer:fail",
    "lose-answer:release",
    "worker-after-chunk:1",
    "worker-after-chunk:2",
    "worker-before-complete",
]
# Injected faults and their weights.
FAULTS: dict[str, float] = {
    "worker-kill": 30,
    "worker-stop": 20,
    "worker-term": 7,
    "operator-kill": 5,
    "operator-stop": 4,
    "stale-write": 12,
}


@dataclass
class Outcome:
    verdict: Verdict
    history: History
    workdir: Path

    @property
    def ok(self) -> bool:
        return not self.verdict.violations

    @property
    def line(self) -> str:
        return summary_line(self.history, self.verdict)

    def report(self, limit: int = 40) -> str:
        """Every violation with its evidence (the first `limit`)."""
        v = self.verdict.violations
        parts = [x.describe() for x in v[:limit]]
        if len(v) > limit:
            parts.append(f"... and {len(v) - limit} more")
        return "\n".join(parts)


def summary_line(h: History, verdict: Verdict) -> str:
    """The one line of a run."""
    s = verdict.stats
    faults = s.get("faults", {})
    fault_text = ", ".join(f"{k} {n}" for k, n in sorted(faults.items()))
    phases = ", ".join(f"{k} {n}" for k, n in sorted(s.get("phases", {}).items()))
    kill = s.get("max_kill_to_queued")
    kill_text = (
        f"{kill.delay:.2f} s (lease {kill.lease:g} s, bound lease + {2 * h.tick:g} s; "
        f"{s.get('kill_samples', 0)} kills)"
        if kill is not None
        else "n/a (no kill of a lease holder while the operator was up)"
    )
    disrupted = s.get("max_kill_to_queued_disrupted")
    if disrupted is not None:
        kill_text += (
            f"; {disrupted:.2f} s when the operator or the control plane was down meanwhile "
            f"({s.get('kill_samples_disrupted', 0)} kills, bound lease + "
            f"{2 * h.tick:g} s after it was back)"
        )
    margin = s.get("reclaim_margin_min")
    by = verdict.by_invariant()
    broken = ", ".join(f"{i}: {NAMES[i]} x{n}" for i, n in sorted(by.items())) or "none"
    return (
        f"chaos seed={h.seed} {h.profile} {h.seconds:.0f} s: "
        f"faults {sum(faults.values())} ({fault_text}); "
        f"jobs {s.get('jobs', 0)} ({phases}); lost {s.get('lost', 0)}; "
        f"duplicate accepted results {s.get('duplicates', 0)}; "
        f"items not converged {s.get('unconverged', 0)}"
        f"{_after(s.get('converge_seconds'))}; "
        f"max attempts {s.get('max_attempts', 0)}; "
        f"max kill->Queued {kill_text}; "
        f"reclaims {s.get('reclaims', 0)} (min margin "
        f"{'n/a' if margin is None else f'{margin:+.2f} s'}); "
        f"item lag {_seconds(s.get('item_lag_p99'))} p99, {_seconds(s.get('item_lag_max'))} max; "
        f"unreferenced ConfigMaps left: {s.get('orphan_transcripts', 0)} transcripts, "
        f"{s.get('chunk_maps_left', 0)} chunk maps; "
        f"SIGTERMed workers that did not exit 0: {len(s.get('unclean_stops', []))}"
        f"{' (' + ', '.join(s['unclean_stops']) + ')' if s.get('unclean_stops') else ''}; "
        f"violations: {broken}"
    )


def _rule(e: ApiException) -> str:
    """The first refusal message of a 422 (which CEL rule said no), shortened."""
    try:
        causes = json.loads(e.body or "{}").get("details", {}).get("causes") or [{}]
        message = str(causes[0].get("message") or e.reason)
    except ValueError:
        message = str(e.reason)
    return message[:120]


def _after(seconds: float | None) -> str:
    return "" if seconds is None else f" (all {seconds:.1f} s after the last job ended)"


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"


@dataclass(order=True)
class _Due:
    at: float
    seq: int
    what: str = field(compare=False)
    action: Callable[[], None] = field(compare=False)


class ServerKeeper:
    """Restarts etcd or kube-apiserver on its own thread, one at a time, and notes when the
    API server takes writes again, so that the run's loop never waits for a server.

    The servers it starts die with the thread that started them (PR_SET_PDEATHSIG is per
    thread), so this thread lives until the control plane is stopped: `close()` after
    `ControlPlane.stop()`.
    """

    def __init__(self, cp: ControlPlane, ready: Callable[[], bool]) -> None:
        self.cp = cp
        self.ready = ready
        self._requests: queue.Queue[tuple[str, signal.Signals, dict[str, Any]] | None] = (
            queue.Queue()
        )
        self._busy = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-servers", daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        return self._busy.is_set()

    def restart(self, name: str, sig: signal.Signals, detail: dict[str, Any]) -> None:
        """Restart `name` with `sig`; `detail["ready"]` is set (wall time) once it is back."""
        self._busy.set()
        self._requests.put((name, sig, detail))

    def close(self) -> None:
        self._requests.put(None)
        self._thread.join(timeout=60)

    def _run(self) -> None:
        while (request := self._requests.get()) is not None:
            name, sig, detail = request
            try:
                self.cp.restart(name, sig=sig, wait=False)
                started = time.time()
                while time.time() - started < 120:
                    time.sleep(0.25)
                    if time.time() - started > 0.5 and self.ready():
                        detail["ready"] = time.time()
                        break
            except Exception as e:  # reported in the run's line as a restart never ready
                detail["error"] = str(e)[:300]
            finally:
                self._busy.clear()


class Chaos:
    """The run's state; `run()` drives it."""

    def __init__(self, seed: int, profile: Profile, workdir: Path) -> None:
        self.seed = seed
        self.profile = profile
        self.workdir = workdir
        self.rng = random.Random(seed)
        self.created = time.time()
        self.waves: list[Wave] = plan_workload(profile, self.rng)
        self.expected: dict[str, str] = {}
        for wave in self.waves:
            for sub in wave.submissions:
                kind = sub.manifest["metadata"]["labels"][KIND_LABEL]
                if sub.kind == "Batch":
                    for item in sub.manifest["spec"]["items"]:
                        self.expected[job_name(sub.name, item["key"])] = kind
                else:
                    self.expected[sub.name] = kind
        self.cp = ControlPlane(workdir=workdir / "control-plane", controller_manager=False)
        self.faults: list[dict[str, Any]] = []
        self.due: list[_Due] = []
        self._seq = itertools.count()
        self.started = 0.0
        self.faults_ended = 0.0
        self.drained: float | None = None
        self.converged: float | None = None
        self.draining = False
        self.servers: ServerKeeper | None = None
        self.fleet: Fleet | None = None
        self.recorder: JobRecorder | None = None
        self.batch_recorder: JobRecorder | None = None
        self.tracker: LeaderTracker | None = None
        self.api: client.ApiClient | None = None
        self.slots: dict[str, Process | None] = {"a": None, "b": None}
        self.probes = 0

    # -- set-up ------------------------------------------------------------------------------

    def start(self) -> None:
        self.cp.start(timeout=180)
        self.servers = ServerKeeper(self.cp, self.back)
        install_crds(str(self.cp.kubeconfig))
        self.api = load_api_client(self.cp.kubeconfig, pool_size=4)
        client.CoreV1Api(self.api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE))
        )
        env = self.cp.env()
        env.update(
            {
                "RECALL_LOG_FORMAT": "json",
                "PYTHONUNBUFFERED": "1",
                "RECALL_WORKER_SIMULATED_RECORD": str(self.workdir / "engine.jsonl"),
                "RECALL_WORKER_RETRY_BASE_SECONDS": "0.5",
                "RECALL_WORKER_RETRY_CAP_SECONDS": "4",
                "RECALL_OPERATOR_TICK_SECONDS": str(self.profile.tick_seconds),
                "RECALL_OPERATOR_RECONCILE_INTERVAL": str(self.profile.reconcile_interval),
                "RECALL_OPERATOR_LEASE_DURATION": str(self.profile.leader_lease),
                "RECALL_OPERATOR_RENEW_DEADLINE": str(self.profile.leader_renew_deadline),
                "RECALL_OPERATOR_RETRY_PERIOD": str(self.profile.leader_retry_period),
            }
        )
        self.fleet = Fleet(env, self.workdir / "logs", NAMESPACE)
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
        for slot in self.slots:
            self.slots[slot] = self.fleet.operator(slot, {})
        for _ in range(self.profile.workers):
            self.spawn_worker()

    def spawn_worker(self) -> None:
        assert self.fleet is not None
        fault = None if self.draining else self.rng.choice(WORKER_FAULTS)
        grace = self.rng.choice([0.0, 0.5, 1.0, 3.0])
        self.fleet.worker({"RECALL_WORKER_GRACE_SECONDS": str(grace)}, fault)

    # -- the loop ----------------------------------------------------------------------------

    def later(self, delay: float, what: str, action: Callable[[], None]) -> None:
        heapq.heappush(self.due, _Due(time.time() + delay, next(self._seq), what, action))

    def fault(self, kind: str, target: str | None, **detail: Any) -> dict[str, Any]:
        record = {"t": time.time(), "kind": kind, "target": target, "detail": detail}
        self.faults.append(record)
        return record

    def run(self, say: Callable[[str], None]) -> None:
        p = self.profile
        self.started = time.time()
        end = self.started + p.duration
        next_fault = self.started + self.rng.expovariate(1 / p.fault_interval)
        restarts = self._restart_schedule()
        pending: list[Any] = []
        waves = list(self.waves)
        last_say = 0.0
        while time.time() < end:
            now = time.time()
            while waves and now >= self.started + waves[0].at:
                pending.extend(waves.pop(0).submissions)
            pending = self.submit(pending)
            self.housekeeping()
            if restarts and now >= restarts[0][0] and not self.restarting:
                self.restart_server(restarts.pop(0)[1])
            if now >= next_fault:
                self.inject()
                next_fault = now + self.rng.expovariate(1 / p.fault_interval)
            if now - last_say > 15:
                last_say = now
                say(self.progress())
            time.sleep(0.05)
        self.faults_ended = time.time()
        self.draining = True
        say(f"faults over; draining ({self.progress()})")
        self.drain(pending, say)

    def _restart_schedule(self) -> list[tuple[float, str]]:
        p = self.profile
        names = ["etcd"] * p.etcd_restarts + ["kube-apiserver"] * p.apiserver_restarts
        self.rng.shuffle(names)
        span = p.duration * 0.8
        return [
            (self.started + span * (i + 0.5) / len(names) + self.rng.uniform(-2, 2), name)
            for i, name in enumerate(names)
        ]

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
        assert self.fleet is not None
        now = time.time()
        while self.due and self.due[0].at <= now:
            heapq.heappop(self.due).action()
        for proc in self.fleet.poll():
            if proc.role == "worker":
                if proc.end_reason == CRASH_POINT:
                    # It killed itself at a fault point, by now (no earlier than its last log
                    # line): its leases count for the kill -> Queued delay too.
                    leases = self.holders().get(proc.name, [])
                    self.fault("worker-crash", proc.name, leases=leases)
                self.later(self.rng.uniform(0.2, 1.5), "replace", self.spawn_worker)
            elif self.slots.get(proc.name.split("-")[1]) is proc:
                slot = proc.name.split("-")[1]
                self.later(self.rng.uniform(0.5, 3.0), "restart", partial(self.restart_op, slot))
        for proc in self.fleet.self_paused():
            delay = 0.5 if self.draining else self.rng.uniform(0.5, 8.0)
            self.later(delay, "continue", partial(self.resume, proc))

    def resume(self, proc: Process) -> None:
        assert self.fleet is not None
        self.fleet.send(proc, signal.SIGCONT)

    def restart_op(self, slot: str) -> None:
        assert self.fleet is not None
        self.slots[slot] = self.fleet.operator(slot, {})

    def back(self) -> bool:
        """etcd healthy, kube-apiserver ready, and a write accepted."""
        return self.servers_ready() and self.writable()

    def servers_ready(self) -> bool:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.cp.etcd_port}/health", timeout=1
            ) as r:
                if json.loads(r.read()).get("health") != "true":
                    return False
        except (OSError, ValueError):
            return False
        return self.cp.ready()

    def writable(self) -> bool:
        """Whether the API server takes a write (a ConfigMap of the run's own) right now."""
        assert self.api is not None
        core = client.CoreV1Api(self.api)
        body = {"metadata": {"name": "chaos-probe"}, "data": {"t": str(time.time())}}
        try:
            try:
                core.patch_namespaced_config_map("chaos-probe", NAMESPACE, body, _request_timeout=1)
            except ApiException as e:
                if e.status != 404:
                    return False
                core.create_namespaced_config_map(NAMESPACE, body, _request_timeout=1)
        except Exception:
            return False
        return True

    # -- faults ------------------------------------------------------------------------------

    def holders(self) -> dict[str, list[dict[str, Any]]]:
        """Worker -> the leases it holds, as the recorder last saw them."""
        assert self.recorder is not None
        out: dict[str, list[dict[str, Any]]] = {}
        for name, obj in self.recorder.current().items():
            lease = obj["status"].get("lease")
            if lease:
                out.setdefault(lease["holder"], []).append(
                    {"job": name, "token": lease["token"], "duration": lease["durationSeconds"]}
                )
        return out

    def pick_worker(self, prefer_holders: bool = True) -> Process | None:
        assert self.fleet is not None
        live = [p for p in self.fleet.live("worker") if not p.frozen]
        if not live:
            return None
        holding = [p for p in live if p.name in self.holders()]
        if prefer_holders and holding and self.rng.random() < 0.8:
            return self.rng.choice(holding)
        return self.rng.choice(live)

    def is_leader(self, proc: Process) -> bool:
        """Whether `proc` leads, by the Lease or by its own log (whichever knows)."""
        assert self.tracker is not None
        if self.tracker.holder() == proc.identity:
            return True
        state = None
        for line in proc.tail(400).splitlines():
            if '"leader_elected"' in line:
                state = True
            elif '"leader_lost"' in line or '"leader_stopped"' in line:
                state = False
        return bool(state)

    def inject(self) -> None:
        kinds, weights = list(FAULTS), list(FAULTS.values())
        kind = self.rng.choices(kinds, weights)[0]
        getattr(self, "fault_" + kind.replace("-", "_"))()

    def fault_worker_kill(self) -> None:
        assert self.fleet is not None
        proc = self.pick_worker()
        if proc is None:
            return
        leases = self.holders().get(proc.name, [])
        t = self.fleet.send(proc, signal.SIGKILL)
        self.faults.append(
            {"t": t, "kind": "worker-kill", "target": proc.name, "detail": {"leases": leases}}
        )

    def fault_worker_stop(self) -> None:
        assert self.fleet is not None
        proc = self.pick_worker()
        if proc is None:
            return
        leases = self.holders().get(proc.name, [])
        lease = float(leases[0]["duration"]) if leases else 3.0
        seconds = round(self.rng.uniform(0.2, 2.5) * lease, 2)
        t = self.fleet.send(proc, signal.SIGSTOP)
        self.faults.append(
            {
                "t": t,
                "kind": "worker-stop",
                "target": proc.name,
                "detail": {"leases": leases, "seconds": seconds, "past_lease": seconds > lease},
            }
        )
        self.later(seconds, "continue", partial(self.resume, proc))

    def fault_worker_term(self) -> None:
        assert self.fleet is not None
        proc = self.pick_worker()
        if proc is None:
            return
        leases = self.holders().get(proc.name, [])
        t = self.fleet.send(proc, signal.SIGTERM)
        self.faults.append(
            {"t": t, "kind": "worker-term", "target": proc.name, "detail": {"leases": leases}}
        )

    def _pick_operator(self) -> Process | None:
        live = [p for p in self.slots.values() if p is not None and p.alive and not p.frozen]
        if not live:
            return None
        leaders = [p for p in live if self.is_leader(p)]
        if leaders and self.rng.random() < 0.75:
            return self.rng.choice(leaders)
        return self.rng.choice(live)

    def fault_operator_kill(self) -> None:
        assert self.fleet is not None
        proc = self._pick_operator()
        if proc is None:
            return
        leader = self.is_leader(proc)
        t = self.fleet.send(proc, signal.SIGKILL)
        self.faults.append(
            {"t": t, "kind": "operator-kill", "target": proc.name, "detail": {"leader": leader}}
        )

    def fault_operator_stop(self) -> None:
        assert self.fleet is not None
        proc = self._pick_operator()
        if proc is None:
            return
        leader = self.is_leader(proc)
        seconds = round(self.rng.uniform(1.0, 2.0 * self.profile.leader_lease), 2)
        t = self.fleet.send(proc, signal.SIGSTOP)
        detail: dict[str, Any] = {"leader": leader, "seconds": seconds}
        self.faults.append({"t": t, "kind": "operator-stop", "target": proc.name, "detail": detail})

        def resume() -> None:
            detail["continued"] = self.fleet.send(proc, signal.SIGCONT)  # type: ignore[union-attr]

        self.later(seconds, "continue", resume)

    def fault_stale_write(self) -> None:
        """A careless client: a status write without resourceVersion to a job it does not hold.
        The API server must refuse it (422), whoever sends it:

        - `forge-complete`, `forge-renew`: presenting a token whose lease is over, to a job
          leased again since (a zombie);
        - `steal`, `blind-renew`: to a leased job, a new lease in place of the current one, or a
          renewal with a token that was never issued;
        - `rewrite-result`, `reopen`: changing a Succeeded job's result, a Failed job's phase.
        """
        assert self.recorder is not None and self.api is not None
        current = self.recorder.current()
        kinds: dict[str, list[str]] = {"stale": [], "leased": [], "Succeeded": [], "Failed": []}
        for name, obj in current.items():
            status = obj["status"]
            phase = status.get("phase") or "Queued"
            if phase == "Leased":
                kinds["leased"].append(name)
                if len(self.recorder.tokens(name)) > 1:
                    kinds["stale"].append(name)
            elif phase in ("Succeeded", "Failed"):
                kinds[phase].append(name)
        weights = {"stale": 4, "leased": 3, "Succeeded": 1.5, "Failed": 1.5}
        choices = [k for k in kinds if kinds[k]]
        if not choices:
            return
        kind = self.rng.choices(choices, [weights[k] for k in choices])[0]
        name = self.rng.choice(sorted(kinds[kind]))
        status = current[name]["status"]
        self.probes += 1
        probe = f"probe-{self.probes}"
        now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        fresh = f"{self.rng.getrandbits(128):032x}"
        body: dict[str, Any]
        if kind == "stale":
            lease = status.get("lease") or {}
            stale = sorted(
                (t, seen)
                for t, seen in self.recorder.tokens(name).items()
                if t != lease.get("token")
            )
            if not stale:
                return
            token, seen = self.rng.choice(stale)
            if self.rng.random() < 0.5:
                variant = "forge-complete"
                body = {
                    "phase": "Succeeded",
                    "lease": None,
                    "fence": f"{token}/{probe}",
                    "result": {
                        "configMap": f"{FORGED}{self.probes}",
                        "token": token,
                        "attempt": seen["attempt"],
                        "worker": seen["lease"]["holder"],
                    },
                }
            else:
                variant = "forge-renew"
                body = {"fence": f"{token}/{probe}", "lease": {"renewTime": now}}
        elif kind == "leased":
            if self.rng.random() < 0.5:
                variant = "steal"
                body = {
                    "lease": {
                        "holder": CARELESS,
                        "token": fresh,
                        "acquireTime": now,
                        "renewTime": now,
                        "durationSeconds": 60,
                    },
                    "fence": f"{fresh}/{probe}",
                    "attempts": int(status.get("attempts") or 0) + 1,
                }
            else:
                variant = "blind-renew"
                body = {"fence": f"{fresh}/{probe}", "lease": {"renewTime": now}}
        elif kind == "Succeeded":
            variant = "rewrite-result"
            body = {"result": {"configMap": f"{FORGED}{self.probes}"}}
        else:
            variant = "reopen"
            body = {"phase": "Queued", "fence": f"{fresh}/{probe}"}
        outcome, rule = self._probe(name, body)
        self.fault("stale-write", name, variant=variant, outcome=outcome, rule=rule, patch=body)

    def _probe(self, name: str, status: dict[str, Any]) -> tuple[str, str | None]:
        assert self.api is not None
        custom = client.CustomObjectsApi(self.api)
        try:
            custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                NAMESPACE,
                JOB_PLURAL,
                name,
                {"status": status},
                _content_type=MERGE_PATCH,
                _request_timeout=3,
            )
        except ApiException as e:
            if e.status == 422:
                return "refused", _rule(e)
            return f"unknown: {e.status}", None
        except Exception as e:  # the API server is restarting
            return f"unknown: {type(e).__name__}", None
        return "accepted", None

    @property
    def restarting(self) -> bool:
        return self.servers is not None and self.servers.busy

    def restart_server(self, name: str) -> None:
        assert self.servers is not None
        sig = self.rng.choice([signal.SIGKILL, signal.SIGTERM])
        record = self.fault("control-plane-restart", name, signal=sig.name)
        self.servers.restart(name, sig, record["detail"])

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

    # -- drain and the end -------------------------------------------------------------------

    def drain(self, pending: list[Any], say: Callable[[str], None]) -> None:
        assert self.fleet is not None
        for proc in self.fleet.procs:
            if proc.alive and proc.frozen:
                self.fleet.send(proc, signal.SIGCONT)
        for d in self.due:  # continue and restart at once what was due later
            d.at = min(d.at, time.time())
        heapq.heapify(self.due)
        deadline = self.faults_ended + self.profile.drain_timeout
        last_check = 0.0
        last_say = time.time()
        while time.time() < deadline:
            pending = self.submit(pending)
            self.housekeeping()
            for proc in self.fleet.procs:
                if proc.alive and proc.stopped_at is not None:
                    self.fleet.send(proc, signal.SIGCONT)
            now = time.time()
            if now - last_check > 1.0 and not self.restarting:
                last_check = now
                if not pending and self.all_ended():
                    self.drained = now
                    break
            if now - last_say > 15:
                last_say = now
                say(f"draining: {self.progress()}")
            time.sleep(0.05)
        if self.drained is not None:
            # DESIGN §4: every item matches its job within one reconcile period
            p = self.profile
            self.converged = self.wait_converged(timeout=p.reconcile_interval + 4 * p.tick_seconds)

    def _list(self, plural: str) -> list[dict[str, Any]]:
        assert self.api is not None
        out = client.CustomObjectsApi(self.api).list_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, plural, _request_timeout=10
        )
        items: list[dict[str, Any]] = out.get("items") or []
        return items

    def all_ended(self) -> bool:
        try:
            jobs = {o["metadata"]["name"]: o for o in self._list(JOB_PLURAL)}
        except Exception:
            return False
        return all(
            name in jobs
            and (jobs[name].get("status") or {}).get("phase")
            in ("Succeeded", "Failed", "Cancelled")
            for name in self.expected
        )

    def wait_converged(self, timeout: float) -> float | None:
        """Until every Batch item shows its job's phase, or `timeout`; returns when (wall
        time), None if they did not."""
        from recall.models import ITEM_PHASE_OF_JOB, BatchStatus, Phase
        from recall.projection import CODES, stored_phases

        deadline = time.time() + timeout
        while time.time() < deadline:
            self.housekeeping()
            try:
                jobs = {o["metadata"]["name"]: o for o in self._list(JOB_PLURAL)}
                batches = self._list(BATCH_PLURAL)
            except Exception:
                time.sleep(0.2)
                continue
            ok = True
            for b in batches:
                items = b["spec"].get("items") or []
                status = BatchStatus.model_validate(b.get("status") or {})
                codes = stored_phases(status, len(items))
                for i, item in enumerate(items):
                    job = jobs.get(job_name(b["metadata"]["name"], item["key"]))
                    phase = Phase((job or {}).get("status", {}).get("phase") or "Queued")
                    if status.counts is None or CODES[codes[i]] != ITEM_PHASE_OF_JOB[phase]:
                        ok = False
            if ok:
                return time.time()
            time.sleep(0.2)
        return None

    def final_state(self) -> Final:
        assert self.api is not None
        final = Final()
        for attempt in range(20):
            try:
                final.jobs = {o["metadata"]["name"]: compact(o) for o in self._list(JOB_PLURAL)}
                final.batches = self._list(BATCH_PLURAL)
                final.config_maps, final.chunk_maps = self._transcripts(final.jobs)
                return final
            except Exception:
                time.sleep(0.5 * (attempt + 1))
        raise RuntimeError("the final state could not be read: the API server does not answer")

    def _transcripts(
        self, jobs: dict[str, dict[str, Any]]
    ) -> tuple[dict[str, dict[str, str]], list[str]]:
        """The accepted results' transcripts read back (as `segments.json`: start and text of
        each segment), and the names of the transcript ConfigMaps that neither a result nor the
        checkpoint of an unfinished job references."""
        assert self.api is not None
        store = KubeStore(self.api, timeout=20)
        listed = store.list_config_maps(NAMESPACE, LABEL_KIND)
        by_name = {cm.name: cm for cm in listed}
        transcripts: dict[str, dict[str, str]] = {}
        referenced: set[str] = set()
        for job in jobs.values():
            status = job.get("status") or {}
            checkpoint = (status.get("progress") or {}).get("checkpoint")
            if checkpoint and status.get("phase") in ("Queued", "Leased"):
                # A checkpoint a later attempt resumes from: referenced, not left over.
                full = store.get_config_map(NAMESPACE, checkpoint)
                if full is not None:
                    referenced |= references(checkpoint, {checkpoint: full}) or set()
            name = (status.get("result") or {}).get("configMap")
            if not name:
                continue
            full = store.get_config_map(NAMESPACE, name)
            if full is not None:
                referenced |= references(name, {name: full}) or set()
            try:
                read = TranscriptStore(store).load_transcript(NAMESPACE, name)
            except LookupError as e:
                transcripts[name] = {"error": str(e)}
                continue
            if read is not None:
                segments = [{"start": g.start, "text": g.text} for g in read.segments]
                transcripts[name] = {"segments.json": json.dumps(segments)}
        manifests = {n for n, cm in by_name.items() if cm.labels.get(LABEL_KIND) == MANIFEST}
        for name in manifests - referenced:
            transcripts.setdefault(name, {})  # an orphan manifest
        left = sorted(n for n in by_name if n not in referenced and n not in manifests)
        return transcripts, left

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
            seed=self.seed,
            profile=self.profile.name,
            seconds=time.time() - self.created,
        )
        save_run(skeleton, self.workdir)
        return load(self.workdir)

    def stop(self) -> None:
        """Stop everything this run started; never raises."""
        steps: list[Callable[[], object]] = [self.cp.stop]
        if self.servers is not None:
            steps.append(self.servers.close)
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
        say(f"chaos seed={seed} {profile.name}: starting the control plane")
        chaos.start()
        chaos.run(say)
        final = chaos.final_state()
        assert chaos.fleet is not None
        chaos.fleet.poll()  # how the processes that ended during the final read ended
    finally:
        chaos.stop()
    history = chaos.history(final)
    outcome = Outcome(check(history), history, workdir)
    (workdir / "verdict.txt").write_text(outcome.line + "\n" + outcome.report(10_000) + "\n")
    return outcome
