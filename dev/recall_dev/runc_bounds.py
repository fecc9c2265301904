"""runc, with a container's capabilities cut to those this host can grant: the kind daemon's
runtime (recall_dev.docker.KIND_DAEMON).

    python -m recall_dev.runc_bounds <runc arguments>      (called by containerd's shim)

Why: kind runs its nodes with `docker run --privileged`, and Docker 20.10 gives a privileged
container every capability the kernel knows. On a host whose root lacks one of them in its
bounding set (this VM's root has no CAP_SYS_RESOURCE), runc then fails with "unable to apply
caps: operation not permitted", and no node starts. A process can never hold a capability
outside its bounding set, so asking for it can only fail; dropping it changes nothing else.

Contract: for `create` and `run` it rewrites the bundle's config.json, for `exec` the
`--process` file, removing from every capability set (bounding, effective, inheritable,
permitted, ambient) the capabilities missing from this process's own bounding set (inherited
from dockerd); then it execs the real runc with the same arguments. Every other command is
passed through untouched. It never adds a capability, and touches nothing but capabilities.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

# Capability numbers, as in linux/capability.h (the order is the ABI).
CAPABILITIES = (
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
    "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
    "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
    "SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
    "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
    "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
)  # fmt: skip
RUNC_CANDIDATES = ("/usr/sbin/runc", "/usr/bin/runc", "/usr/local/sbin/runc")


def missing_capabilities(status: str) -> set[str]:
    """The known capabilities absent from the bounding set in a /proc/<pid>/status text."""
    line = next(line for line in status.splitlines() if line.startswith("CapBnd:"))
    bounding = int(line.split()[1], 16)
    return {f"CAP_{name}" for bit, name in enumerate(CAPABILITIES) if not bounding >> bit & 1}


def bounded(capabilities: dict[str, list[str]], missing: set[str]) -> dict[str, list[str]]:
    """Each capability set without the capabilities in `missing`."""
    return {kind: [c for c in caps if c not in missing] for kind, caps in capabilities.items()}


def _option(args: list[str], *names: str) -> str | None:
    for i, arg in enumerate(args):
        if arg in names and i + 1 < len(args):
            return args[i + 1]
        for name in names:
            if name.startswith("--") and arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def _rewrite(path: Path, missing: set[str], *, process_only: bool) -> None:
    spec = json.loads(path.read_text())
    process = spec if process_only else spec.get("process", {})
    caps = process.get("capabilities")
    if not caps:
        return
    process["capabilities"] = bounded(caps, missing)
    path.write_text(json.dumps(spec))


def main(argv: list[str]) -> None:
    missing = missing_capabilities(Path("/proc/self/status").read_text())
    commands = set(argv)
    if missing and commands & {"create", "run"}:
        bundle = Path(_option(argv, "--bundle", "-b") or ".")
        _rewrite(bundle / "config.json", missing, process_only=False)
    elif missing and "exec" in commands:
        process = _option(argv, "--process", "-p")
        if process:
            _rewrite(Path(process), missing, process_only=True)
    runc = os.environ.get("RECALL_RUNC") or next(
        (c for c in RUNC_CANDIDATES if os.access(c, os.X_OK)), shutil.which("runc")
    )
    if runc is None:
        sys.exit("runc_bounds: no runc found")
    os.execv(runc, [runc, *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
