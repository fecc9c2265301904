"""The faults a chaos run injects at random, and the record of every fault of the run.

`Injector.inject()` picks one of `FAULTS` by weight and injects it: SIGKILL, SIGSTOP (continued
later, some after their lease) or SIGTERM a worker, mostly one that holds a lease; SIGKILL or
SIGSTOP an operator, mostly the leader; write, as a careless client, a job's status with a
stale token and no resourceVersion, which the API server must refuse (`fault_stale_write`);
or hit the results store through its proxy (`recall_dev.chaos.bucket`): slow for a few
seconds, a burst of PUTs whose answers are lost (the PUT is applied; the connection is reset,
or held silent until the burst ends), or down (connections refused) for a few seconds. A store
fault of a kind already on is not injected again until it ends.
`WORKER_FAULTS` are the fault points a new worker may be started with (see `recall.base.faults`).

Every fault is appended to `log` as `{"t", "kind", "target", "detail"}` (`note`), also those
the run itself notes (control-plane restarts, workers that crashed at a fault point).
Call everything from the run's main loop.
"""

from __future__ import annotations

import json
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from recall.resources import GROUP, JOB_PLURAL, VERSION
from recall_dev.chaos.bucket import RunStore
from recall_dev.chaos.fleet import Fleet, Process
from recall_dev.chaos.invariants import CARELESS, FORGED
from recall_dev.chaos.recorder import JobRecorder, LeaderTracker

MERGE_PATCH = "application/merge-patch+json"

# Fault points a new worker may run with (see `recall.base.faults`); None: no fault point.
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
    "store-slow": 3,
    "store-lost-puts": 6,
    "store-down": 1.5,
}
# The jobs a stale write goes to, and their weights.
STALE_TARGETS: dict[str, float] = {"stale": 4, "leased": 3, "Succeeded": 1.5, "Failed": 1.5}

# A stale write: its variant and the status patch.
Write = tuple[str, dict[str, Any]]


@dataclass
class Injector:
    """Injects the faults of one run; `operators` are the run's operator slots, which the run
    keeps current, and `later(delay, what, action)` schedules an action of the run's loop."""

    rng: random.Random
    fleet: Fleet
    recorder: JobRecorder
    tracker: LeaderTracker
    api: client.ApiClient
    namespace: str
    operators: dict[str, Process | None]
    later: Callable[[float, str, Callable[[], None]], None]
    leader_lease: float
    store: RunStore
    log: list[dict[str, Any]] = field(default_factory=list)
    probes: int = 0

    def note(
        self, kind: str, target: str | None, detail: dict[str, Any], t: float | None = None
    ) -> dict[str, Any]:
        """Append a fault to the log (at `t`, or now) and return its record."""
        when = time.time() if t is None else t
        record: dict[str, Any] = {"t": when, "kind": kind, "target": target, "detail": detail}
        self.log.append(record)
        return record

    def inject(self) -> None:
        kinds, weights = list(FAULTS), list(FAULTS.values())
        kind = self.rng.choices(kinds, weights)[0]
        getattr(self, "fault_" + kind.replace("-", "_"))()

    # -- whom to hit -------------------------------------------------------------------------

    def holders(self) -> dict[str, list[dict[str, Any]]]:
        """Worker -> the leases it holds, as the recorder last saw them."""
        out: dict[str, list[dict[str, Any]]] = {}
        for name, obj in self.recorder.current().items():
            lease = obj["status"].get("lease")
            if lease:
                out.setdefault(lease["holder"], []).append(
                    {"job": name, "token": lease["token"], "duration": lease["durationSeconds"]}
                )
        return out

    def pick_worker(self, prefer_holders: bool = True) -> Process | None:
        live = [p for p in self.fleet.live("worker") if not p.frozen]
        if not live:
            return None
        holding = [p for p in live if p.name in self.holders()]
        if prefer_holders and holding and self.rng.random() < 0.8:
            return self.rng.choice(holding)
        return self.rng.choice(live)

    def is_leader(self, proc: Process) -> bool:
        """Whether `proc` leads, by the Lease or by its own log (whichever knows)."""
        if self.tracker.holder() == proc.identity:
            return True
        state = None
        for line in proc.tail(400).splitlines():
            if '"leader_elected"' in line:
                state = True
            elif '"leader_lost"' in line or '"leader_stopped"' in line:
                state = False
        return bool(state)

    def pick_operator(self) -> Process | None:
        live = [p for p in self.operators.values() if p is not None and p.alive and not p.frozen]
        if not live:
            return None
        leaders = [p for p in live if self.is_leader(p)]
        if leaders and self.rng.random() < 0.75:
            return self.rng.choice(leaders)
        return self.rng.choice(live)

    # -- processes ---------------------------------------------------------------------------

    def resume(self, proc: Process) -> None:
        self.fleet.send(proc, signal.SIGCONT)

    def fault_worker_kill(self) -> None:
        proc = self.pick_worker()
        if proc is None:
            return
        leases = self.holders().get(proc.name, [])
        t = self.fleet.send(proc, signal.SIGKILL)
        self.note("worker-kill", proc.name, {"leases": leases}, t)

    def fault_worker_stop(self) -> None:
        proc = self.pick_worker()
        if proc is None:
            return
        leases = self.holders().get(proc.name, [])
        lease = float(leases[0]["duration"]) if leases else 3.0
        seconds = round(self.rng.uniform(0.2, 2.5) * lease, 2)
        t = self.fleet.send(proc, signal.SIGSTOP)
        detail = {"leases": leases, "seconds": seconds, "past_lease": seconds > lease}
        self.note("worker-stop", proc.name, detail, t)
        self.later(seconds, "continue", partial(self.resume, proc))

    def fault_worker_term(self) -> None:
        proc = self.pick_worker()
        if proc is None:
            return
        leases = self.holders().get(proc.name, [])
        t = self.fleet.send(proc, signal.SIGTERM)
        self.note("worker-term", proc.name, {"leases": leases}, t)

    def fault_operator_kill(self) -> None:
        proc = self.pick_operator()
        if proc is None:
            return
        leader = self.is_leader(proc)
        t = self.fleet.send(proc, signal.SIGKILL)
        self.note("operator-kill", proc.name, {"leader": leader}, t)

    def fault_operator_stop(self) -> None:
        proc = self.pick_operator()
        if proc is None:
            return
        leader = self.is_leader(proc)
        seconds = round(self.rng.uniform(1.0, 2.0 * self.leader_lease), 2)
        t = self.fleet.send(proc, signal.SIGSTOP)
        detail: dict[str, Any] = {"leader": leader, "seconds": seconds}
        self.note("operator-stop", proc.name, detail, t)

        def resume() -> None:
            detail["continued"] = self.fleet.send(proc, signal.SIGCONT)

        self.later(seconds, "continue", resume)

    # -- the results store -------------------------------------------------------------------

    def fault_store_slow(self) -> None:
        """Every store request held `delay` s, for `seconds` s."""
        if self.store.active("slow"):
            return
        delay = round(self.rng.uniform(0.2, 1.5), 2)
        seconds = round(self.rng.uniform(2.0, 6.0), 2)
        self.store.slow(delay)
        detail: dict[str, Any] = {"delay": delay, "seconds": seconds}
        self.note("store-slow", "s3", detail)
        self.later(seconds, "store-fast", partial(self._store_ends, self.store.fast, detail))

    def fault_store_lost_puts(self) -> None:
        """The answers of the next `count` PUTs lost (within `seconds` s)."""
        if self.store.active("lose"):
            return
        count = self.rng.randint(2, 8)
        how: Literal["reset", "hang"] = "hang" if self.rng.random() < 0.3 else "reset"
        seconds = round(self.rng.uniform(2.0, 6.0), 2)
        self.store.lose_puts(count, how)
        detail: dict[str, Any] = {"count": count, "how": how, "seconds": seconds}
        self.note("store-lost-puts", "s3", detail)
        self.later(
            seconds, "store-keep-puts", partial(self._store_ends, self.store.keep_puts, detail)
        )

    def fault_store_down(self) -> None:
        """Connections to the store refused for `seconds` s."""
        if self.store.active("down"):
            return
        seconds = round(self.rng.uniform(1.0, 4.0), 2)
        self.store.down()
        detail: dict[str, Any] = {"seconds": seconds}
        self.note("store-down", "s3", detail)
        self.later(seconds, "store-up", partial(self._store_ends, self.store.up, detail))

    def _store_ends(self, end: Callable[[], None], detail: dict[str, Any]) -> None:
        end()
        detail["ended"] = time.time()

    # -- the careless client -----------------------------------------------------------------

    def fault_stale_write(self) -> None:
        """A careless client: a status write without resourceVersion to a job it does not hold.
        The API server must refuse it (422), whoever sends it:

        - `forge-complete`, `forge-renew`: presenting a token whose lease is over, to a job
          leased again since (a zombie);
        - `steal`, `blind-renew`: to a leased job, a new lease in place of the current one, or a
          renewal with a token that was never issued;
        - `rewrite-result`, `reopen`: changing a Succeeded job's result, a Failed job's phase.
        """
        current = self.recorder.current()
        target = self._stale_target(current)
        if target is None:
            return
        kind, name = target
        status = current[name]["status"]
        self.probes += 1
        probe = f"probe-{self.probes}"
        now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        fresh = f"{self.rng.getrandbits(128):032x}"
        write: Write | None
        if kind == "stale":
            write = self._zombie_write(name, status, probe, now)
        elif kind == "leased":
            write = self._intruder_write(status, fresh, probe, now)
        else:
            write = _finished_write(kind, fresh, probe, self.probes)
        if write is None:
            return
        variant, body = write
        outcome, rule = _send(self.api, self.namespace, name, body)
        detail = {"variant": variant, "outcome": outcome, "rule": rule, "patch": body}
        self.note("stale-write", name, detail)

    def _stale_target(self, current: dict[str, Any]) -> tuple[str, str] | None:
        """Which kind of job to write to (a key of `STALE_TARGETS`; "stale": leased again
        since an earlier lease), by weight among the kinds there are jobs of; and which job."""
        kinds: dict[str, list[str]] = {k: [] for k in STALE_TARGETS}
        for name, obj in current.items():
            phase = obj["status"].get("phase") or "Queued"
            if phase == "Leased":
                kinds["leased"].append(name)
                if len(self.recorder.tokens(name)) > 1:
                    kinds["stale"].append(name)
            elif phase in ("Succeeded", "Failed"):
                kinds[phase].append(name)
        choices = [k for k in kinds if kinds[k]]
        if not choices:
            return None
        kind = self.rng.choices(choices, [STALE_TARGETS[k] for k in choices])[0]
        return kind, self.rng.choice(sorted(kinds[kind]))

    def _zombie_write(
        self, name: str, status: dict[str, Any], probe: str, now: str
    ) -> Write | None:
        """With the token of an earlier lease of `name`: complete, or renew; None when the
        recorder saw no earlier lease."""
        lease = status.get("lease") or {}
        stale = sorted(
            (t, seen) for t, seen in self.recorder.tokens(name).items() if t != lease.get("token")
        )
        if not stale:
            return None
        token, seen = self.rng.choice(stale)
        if self.rng.random() < 0.5:
            result = {
                # shaped like the zombie's own transcript key: only the lease rules refuse it
                "transcript": f"{FORGED}{self.probes}/a{seen['attempt']}-{token}/transcript.json",
                "token": token,
                "attempt": seen["attempt"],
                "worker": seen["lease"]["holder"],
            }
            body = {"phase": "Succeeded", "lease": None, "fence": f"{token}/{probe}"}
            return "forge-complete", {**body, "result": result}
        return "forge-renew", {"fence": f"{token}/{probe}", "lease": {"renewTime": now}}

    def _intruder_write(self, status: dict[str, Any], fresh: str, probe: str, now: str) -> Write:
        """With a token never issued, to a leased job: a lease of its own, or a renewal."""
        if self.rng.random() < 0.5:
            lease = {
                "holder": CARELESS,
                "token": fresh,
                "acquireTime": now,
                "renewTime": now,
                "durationSeconds": 60,
            }
            attempts = int(status.get("attempts") or 0) + 1
            return "steal", {"lease": lease, "fence": f"{fresh}/{probe}", "attempts": attempts}
        return "blind-renew", {"fence": f"{fresh}/{probe}", "lease": {"renewTime": now}}


def _finished_write(phase: str, fresh: str, probe: str, n: int) -> Write:
    """To a finished job: a Succeeded job's result replaced, a Failed job Queued again."""
    if phase == "Succeeded":
        forged = {"transcript": f"{FORGED}{n}/a1-{fresh}/transcript.json", "token": fresh}
        return "rewrite-result", {"result": forged}
    return "reopen", {"phase": "Queued", "fence": f"{fresh}/{probe}"}


def _send(
    api: client.ApiClient, namespace: str, name: str, status: dict[str, Any]
) -> tuple[str, str | None]:
    """Patch `name`'s status; returns "accepted", "refused" with the rule that refused it, or
    "unknown: ..." when the API server did not say."""
    custom = client.CustomObjectsApi(api)
    try:
        custom.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            namespace,
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


def _rule(e: ApiException) -> str:
    """The first refusal message of a 422 (which CEL rule said no), shortened."""
    try:
        causes = json.loads(e.body or "{}").get("details", {}).get("causes") or [{}]
        message = str(causes[0].get("message") or e.reason)
    except ValueError:
        message = str(e.reason)
    return message[:120]
