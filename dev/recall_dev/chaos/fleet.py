"""The `recall` processes of a chaos run: workers and operators, the environment they run
with (`environment`), and what was done to them.

Every process logs (JSON) to its own file. The fleet remembers each signal it sent, so that
when a process ends it can say why: `killed` (our SIGKILL), `terminated` (our SIGTERM; the
process should exit 0 after releasing its lease), `crash-point` (it killed itself at a fault
point armed by `RECALL_FAULT`, which prints `recall: fault injected at ...`), or `exited`: it
ended on its own, which no worker or operator may do (DESIGN §5, invariant 9).

Call everything from one thread (the run's main loop).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from recall_dev.chaos.workload import Profile
from recall_dev.procs import die_with_parent

KILLED = "killed"
TERMINATED = "terminated"
CRASH_POINT = "crash-point"
EXITED = "exited"


@dataclass
class Process:
    name: str
    role: str  # "worker" or "operator"
    popen: subprocess.Popen[bytes]
    log: Path
    started: float
    fault: str | None = None  # RECALL_FAULT it runs with
    identity: str | None = None  # an operator's name in the leader Lease
    stopped_at: float | None = None  # SIGSTOPped by us, and not continued yet
    paused_at: float | None = None  # stopped itself at a fault point, not continued yet
    sent: list[tuple[float, str]] = field(default_factory=list)
    ended: float | None = None
    end_reason: str | None = None
    returncode: int | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return self.ended is None

    @property
    def frozen(self) -> bool:
        return self.stopped_at is not None or self.paused_at is not None

    def state(self) -> str:
        """The kernel's state letter (R, S, T for stopped, Z ...), or "?" once gone."""
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return "?"
        return stat.rsplit(")", 1)[1].split()[0]

    def tail(self, lines: int = 12) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def environment(base: dict[str, str], profile: Profile, engine_record: Path) -> dict[str, str]:
    """The environment of every worker and operator of a run of `profile`: `base` (the
    control plane's), JSON logs, the simulated engine's record file, the short retry and
    operator periods, and leader election fast enough for takeovers within a run."""
    return {
        **base,
        "RECALL_LOG_FORMAT": "json",
        "PYTHONUNBUFFERED": "1",
        "RECALL_WORKER_SIMULATED_RECORD": str(engine_record),
        "RECALL_WORKER_RETRY_BASE_SECONDS": "0.5",
        "RECALL_WORKER_RETRY_CAP_SECONDS": "4",
        "RECALL_OPERATOR_TICK_SECONDS": str(profile.tick_seconds),
        "RECALL_OPERATOR_RECONCILE_INTERVAL": str(profile.reconcile_interval),
        "RECALL_OPERATOR_LEASE_DURATION": str(profile.leader_lease),
        "RECALL_OPERATOR_RENEW_DEADLINE": str(profile.leader_renew_deadline),
        "RECALL_OPERATOR_RETRY_PERIOD": str(profile.leader_retry_period),
        "RECALL_OPERATOR_SWEEP_SECONDS": str(profile.sweep_seconds),
    }


class Fleet:
    """The run's processes; `roles` adds variables by role ("worker", "operator"): each
    role's identity for the results store."""

    def __init__(
        self,
        env: dict[str, str],
        logs: Path,
        namespace: str,
        roles: dict[str, dict[str, str]] | None = None,
    ) -> None:
        self.env = env
        self.logs = logs
        self.namespace = namespace
        self.roles = roles or {}
        self.procs: list[Process] = []
        self._counts: dict[str, int] = {}
        logs.mkdir(parents=True, exist_ok=True)

    # -- start -------------------------------------------------------------------------------

    def _spawn(
        self, name: str, role: str, args: list[str], env: dict[str, str], fault: str | None
    ) -> Process:
        log = self.logs / f"{name}.log"
        full = {**self.env, **self.roles.get(role, {}), **env}
        if fault:
            full["RECALL_FAULT"] = fault
        else:
            full.pop("RECALL_FAULT", None)
        with log.open("ab") as out:
            popen = subprocess.Popen(
                [sys.executable, "-m", "recall", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=full,
                start_new_session=True,  # a fault signals one process, never the harness
                preexec_fn=die_with_parent,  # an interrupted run leaves none behind
            )
        proc = Process(name, role, popen, log, time.time(), fault=fault)
        self.procs.append(proc)
        return proc

    def _next(self, prefix: str) -> str:
        self._counts[prefix] = self._counts.get(prefix, 0) + 1
        return f"{prefix}{self._counts[prefix]}"

    def worker(self, env: dict[str, str], fault: str | None = None) -> Process:
        name = self._next("w")
        args = ["worker", "--id", name, "--engine", "simulated", "--namespace", self.namespace]
        return self._spawn(name, "worker", args, env, fault)

    def operator(self, slot: str, env: dict[str, str], fault: str | None = None) -> Process:
        """An operator replica in `slot` ("a" or "b"), with a fresh leader identity."""
        name = self._next(f"op-{slot}-")
        args = ["operator", "--namespace", self.namespace, "--leader-election"]
        env = {**env, "RECALL_OPERATOR_IDENTITY": name}
        proc = self._spawn(name, "operator", args, env, fault)
        proc.identity = name
        return proc

    # -- signals -----------------------------------------------------------------------------

    def send(self, proc: Process, sig: signal.Signals) -> float:
        """Send `sig` and remember it; returns when (wall time)."""
        now = time.time()
        if proc.alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, sig)
            proc.sent.append((now, sig.name))
            if sig is signal.SIGSTOP:
                proc.stopped_at = now
            elif sig is signal.SIGCONT:
                proc.stopped_at = None
                proc.paused_at = None
        return now

    # -- watching ----------------------------------------------------------------------------

    def poll(self) -> list[Process]:
        """Processes that ended since the last poll, each with its `end_reason`."""
        ended = []
        for p in self.procs:
            if p.ended is not None:
                continue
            rc = p.popen.poll()
            if rc is None:
                continue
            p.ended = time.time()
            p.returncode = rc
            p.end_reason = self._reason(p, rc)
            ended.append(p)
        return ended

    def _reason(self, p: Process, rc: int) -> str:
        sent = {name for _, name in p.sent}
        if "SIGKILL" in sent:
            return KILLED
        if rc == -signal.SIGKILL and "recall: fault injected at" in p.tail(200):
            return CRASH_POINT
        if "SIGTERM" in sent:
            return TERMINATED
        return EXITED

    def self_paused(self) -> list[Process]:
        """Live processes stopped at a fault point (not by us), newly noticed."""
        out = []
        for p in self.procs:
            if p.alive and p.stopped_at is None and p.paused_at is None and p.state() == "T":
                p.paused_at = time.time()
                out.append(p)
        return out

    def live(self, role: str) -> list[Process]:
        return [p for p in self.procs if p.alive and p.role == role]

    # -- the end -----------------------------------------------------------------------------

    def stop(self, role: str, grace: float = 10.0) -> None:
        """SIGCONT and SIGTERM every live process of `role` (remembered: they end
        `terminated`), SIGKILL what is left after `grace` (not remembered: such a process
        ended `terminated` with -9, a stop that was not clean); returns when all ended."""
        live = self.live(role)
        for p in live:
            self.send(p, signal.SIGCONT)
            self.send(p, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for p in live:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
            if p.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.popen.wait(timeout=10)
        self.poll()

    def stop_all(self, grace: float = 5.0) -> None:
        """SIGCONT and SIGTERM every live process, SIGKILL what is left after `grace`."""
        live = [p for p in self.procs if p.popen.poll() is None]
        for p in live:
            for sig in (signal.SIGCONT, signal.SIGTERM):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, sig)
        deadline = time.monotonic() + grace
        for p in live:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
            if p.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.popen.wait(timeout=10)
