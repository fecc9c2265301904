"""Server processes of the local control plane: start, liveness, termination, log tails."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


def die_with_parent() -> None:
    """preexec_fn: ask the kernel to SIGKILL this child when its parent dies."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL)


@dataclass
class Proc:
    """One server process and its log file."""

    name: str
    popen: subprocess.Popen[bytes] | None
    log: Path
    pid: int = 0

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return pid_alive(self.pid)


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); it is dead for our purposes.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def terminate(procs: list[Proc], grace: float) -> None:
    for p in procs:
        if p.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.popen.pid if p.popen else p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in procs:
        while p.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if p.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.popen.pid if p.popen else p.pid, signal.SIGKILL)
        if p.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.popen.wait(timeout=10)
        else:
            while pid_alive(p.pid):
                time.sleep(0.05)


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def spawn(
    name: str,
    args: list[str],
    logs_dir: Path,
    workdir: Path | None,
    *,
    owned: bool,
    env: dict[str, str] | None = None,
) -> Proc:
    """Start `args` in its own session, its output appended to `<logs_dir>/<name>.log`; with
    `owned`, it dies with this process; `env` is added to this process's environment."""
    log = logs_dir / f"{name}.log"
    with log.open("ab") as out:
        popen = subprocess.Popen(
            args,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=workdir,
            start_new_session=True,
            preexec_fn=die_with_parent if owned else None,
            env={**os.environ, **env} if env else None,
        )
    return Proc(name, popen, log, popen.pid)
