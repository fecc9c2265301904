"""Tearing the local node down from its state file alone, by hand or by the reaper when the
node's owner dies: processes, containers and their shims, mounts, the pod network, CNI caches,
cgroups, the kubelet's host sysctls and iptables chains, the host paths it created, and its
work directory.

`teardown()` needs no live process and no API server (with one, it deletes the pods first so
the kubelet stops them itself); it is idempotent. What it puts back the way it was — sysctls,
iptables chains, host paths — is what `host_snapshot()` recorded in the state file before the
node started. The reaper (`spawn_reaper()`) is a process outside the owner's process group
that runs `teardown()` once the owner exits without having stopped the node.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from recall_dev import node_net
from recall_dev.node_config import CGROUP_FS, CGROUP_ROOT, Layout
from recall_dev.node_state import STATE_DIR, STATE_FILE, read_state
from recall_dev.procs import Proc, pid_alive, terminate

# Host sysctls the kubelet sets at start (setupKernelTunables); restored by teardown().
KUBELET_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
# What the kubelet may create in iptables (its canary chains), removed when it was not there.
KUBELET_CHAINS = {
    "mangle": ("KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"),
    "nat": ("KUBE-KUBELET-CANARY",),
    "filter": ("KUBE-KUBELET-CANARY", "KUBE-FIREWALL"),
}
# Host paths that containerd, the CNI library and the kubelet create whatever their config says
# (shim sockets, CNI result cache, device-plugin socket, the netns mount point): removed when
# empty of anything but what the node left, if they did not exist before it started.
HOST_PATHS = ("/run/containerd", "/var/lib/cni", "/var/lib/kubelet", "/run/netns")


def host_snapshot() -> dict[str, object]:
    """The state-file fields `teardown()` restores from: the kubelet's sysctls, its iptables
    chains that exist already, and the HOST_PATHS that do not."""
    return {
        "sysctls": _read_sysctls(),
        "chains": _existing_chains(),
        "host_paths_absent": [p for p in HOST_PATHS if not Path(p).exists()],
    }


def teardown(graceful_kubeconfig: Path | None = None, bin_dir: Path | None = None) -> list[str]:
    """Remove the node described by the machine's state file; returns what it removed.

    With `graceful_kubeconfig` the pods are deleted through the API first, so the kubelet
    stops them (and their network) itself; everything after works without an API server.
    """
    state = read_state()
    if state is None:
        return node_net.teardown() if Path(f"/sys/class/net/{node_net.BRIDGE}").exists() else []
    removed: list[str] = []
    workdir = Path(str(state.get("workdir", "")))
    procs_state = state.get("processes", {})
    procs = (
        [Proc(n, None, Path("/dev/null"), int(pid)) for n, pid in procs_state.items()]
        if isinstance(procs_state, dict)
        else []
    )
    by_name = {p.name: p for p in procs}
    kubelet = by_name.get("kubelet")
    if graceful_kubeconfig and bin_dir and kubelet and kubelet.alive():
        subprocess.run(
            [str(bin_dir / "kubectl"), f"--kubeconfig={graceful_kubeconfig}", "delete", "pods",
             "--all", "--all-namespaces", "--grace-period=0", "--force", "--wait=false"],
            capture_output=True, timeout=30,
        )  # fmt: skip
        _wait_no_containers(workdir, timeout=20)
    # The kubelet first (it would restart containers), the scheduler and controllers, then the
    # containers themselves, their shims, and containerd last.
    order = ["kubelet", "kube-scheduler", "kube-controller-manager-node", "node-dns"]
    terminate([by_name[n] for n in order if n in by_name], grace=5)
    removed += _kill_cgroup_processes()
    removed += _kill_shims(workdir)
    if "containerd" in by_name:
        terminate([by_name["containerd"]], grace=5)
    removed += node_net.teardown()
    removed += _remove_cni_results(workdir)
    removed += _unmount_under(workdir)
    removed += _remove_cgroups()
    _restore_sysctls(state.get("sysctls"))
    removed += _remove_kubelet_chains(state.get("chains"))
    removed += _remove_host_paths(state.get("host_paths_absent"))
    if workdir.name and workdir.exists():
        shutil.rmtree(workdir, ignore_errors=True)
        removed.append(f"dir {workdir}")
    STATE_FILE.unlink(missing_ok=True)
    shutil.rmtree(STATE_DIR, ignore_errors=True)
    return removed


# -- the reaper --------------------------------------------------------------------------------


def spawn_reaper(owner: int) -> None:
    """A watchdog outside the owner's process group: when the owner dies without stopping the
    node (a killed test run), it tears the node down. It exits on its own once the owner is
    gone, whatever it found."""
    subprocess.Popen(
        [sys.executable, "-m", "recall_dev.node", "reap", f"--owner={owner}"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )


def reap(owner: int, poll: float = 0.5) -> list[str]:
    """Wait for `owner` to exit; then tear down the node it left, if it left one."""
    while pid_alive(owner):
        time.sleep(poll)
    state = read_state()
    if state is None or int(str(state.get("owner", 0))) != owner:
        return []  # stopped cleanly, or the machine has a new owner
    return teardown()


# -- processes ---------------------------------------------------------------------------------


def _wait_no_containers(workdir: Path, timeout: float) -> None:
    socket = Layout(workdir).containerd_socket
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = subprocess.run(
            ["ctr", "--address", str(socket), "-n", "k8s.io", "tasks", "ls", "-q"],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0 or not done.stdout.strip():
            return
        time.sleep(0.5)


def _kill_cgroup_processes() -> list[str]:
    killed: list[str] = []
    for _round in range(20):
        pids: set[int] = set()
        for d in _cgroup_dirs():
            with contextlib.suppress(OSError):
                pids.update(int(x) for x in (d / "cgroup.procs").read_text().split())
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed.append(f"pod process {pid}")
        time.sleep(0.2)
    return killed


def _kill_shims(workdir: Path) -> list[str]:
    """containerd's shims outlive containerd by design: stop those of this node's socket."""
    socket = str(Layout(workdir).containerd_socket).encode()
    killed: list[str] = []
    for proc_dir in Path("/proc").iterdir():
        if not proc_dir.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmdline = (proc_dir / "cmdline").read_bytes()
            if b"containerd-shim" in cmdline and socket in cmdline:
                os.kill(int(proc_dir.name), signal.SIGKILL)
                killed.append(f"shim {proc_dir.name}")
    return killed


# -- files, mounts and cgroups -----------------------------------------------------------------


def _remove_cni_results(workdir: Path) -> list[str]:
    """The CNI library's cached results of this node's pod sandboxes (a sandbox whose CNI DEL
    never ran, because containerd died first, leaves one per network, loopback included)."""
    sandboxes = Layout(workdir).cri_sandboxes
    if not sandboxes.is_dir() or not node_net.CNI_RESULTS_DIR.is_dir():
        return []
    ids = {d.name for d in sandboxes.iterdir()}
    removed: list[str] = []
    for cached in node_net.CNI_RESULTS_DIR.iterdir():
        if any(f"-{sandbox}-" in cached.name for sandbox in ids):
            cached.unlink(missing_ok=True)
            removed.append(f"CNI result {cached.name}")
    return removed


def _unmount_under(workdir: Path) -> list[str]:
    if not workdir.name:
        return []
    prefix = str(workdir.resolve()) + "/"
    mounts: list[str] = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if point.startswith(prefix):
                mounts.append(point)
    for point in sorted(mounts, key=len, reverse=True):
        if subprocess.run(["umount", point], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", point], capture_output=True)
    return [f"mount {m}" for m in mounts]


def _cgroup_dirs() -> list[Path]:
    """Every cgroup directory of the node, deepest first, across all v1 hierarchies."""
    dirs: list[Path] = []
    if not CGROUP_FS.is_dir():
        return dirs
    for hierarchy in CGROUP_FS.iterdir():
        top = hierarchy / CGROUP_ROOT
        if top.is_dir():
            # The kubelet may remove cgroups while we walk them: what vanished is gone already.
            with contextlib.suppress(FileNotFoundError):
                dirs.extend(p for p in top.rglob("*") if p.is_dir())
            dirs.append(top)
    return sorted(dirs, key=lambda p: len(p.parts), reverse=True)


def _remove_cgroups() -> list[str]:
    removed: list[str] = []
    for d in _cgroup_dirs():
        for _attempt in range(50):
            try:
                d.rmdir()
                removed.append(f"cgroup {d}")
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)
    return removed


def _remove_host_paths(absent: object) -> list[str]:
    """Remove the HOST_PATHS the node created, if nothing but empty dirs and sockets is left."""
    removed: list[str] = []
    for name in absent if isinstance(absent, list) else []:
        top = Path(str(name))
        if str(top) not in HOST_PATHS or not top.is_dir():
            continue
        entries = sorted(top.rglob("*"), key=lambda p: len(p.parts), reverse=True)
        if any(not (e.is_dir() or e.is_socket()) for e in entries):
            continue  # something else lives there now
        subprocess.run(["umount", str(top)], capture_output=True)
        for entry in entries:
            with contextlib.suppress(OSError):
                entry.rmdir() if entry.is_dir() else entry.unlink()
        with contextlib.suppress(OSError):
            top.rmdir()
            removed.append(f"dir {top}")
    return removed


# -- sysctls and iptables chains ---------------------------------------------------------------


def _read_sysctls() -> dict[str, str]:
    values: dict[str, str] = {}
    for key in KUBELET_SYSCTLS:
        with contextlib.suppress(OSError):
            values[key] = (Path("/proc/sys") / key).read_text().strip()
    return values


def _restore_sysctls(saved: object) -> None:
    if not isinstance(saved, dict):
        return
    for key, value in saved.items():
        path = Path("/proc/sys") / str(key)
        with contextlib.suppress(OSError):
            if path.read_text().strip() != value:
                path.write_text(f"{value}\n")


def _existing_chains() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for table, chains in KUBELET_CHAINS.items():
        listing = subprocess.run(
            ["iptables", "-w", "-t", table, "-S"], capture_output=True, text=True
        ).stdout
        found[table] = [c for c in chains if f"-N {c}" in listing]
    return found


def _remove_kubelet_chains(before: object) -> list[str]:
    existed = before if isinstance(before, dict) else {}
    removed: list[str] = []
    for table, chains in KUBELET_CHAINS.items():
        listing = subprocess.run(
            ["iptables", "-w", "-t", table, "-S"], capture_output=True, text=True
        ).stdout
        for chain in chains:
            if f"-N {chain}" not in listing or chain in existed.get(table, []):
                continue
            for line in listing.splitlines():
                if line.startswith("-A ") and f"-j {chain}" in line:
                    rule = line.split()[1:]
                    subprocess.run(
                        ["iptables", "-w", "-t", table, "-D", *rule], capture_output=True
                    )
            subprocess.run(["iptables", "-w", "-t", table, "-F", chain], capture_output=True)
            subprocess.run(["iptables", "-w", "-t", table, "-X", chain], capture_output=True)
            removed.append(f"{table} chain {chain}")
    return removed
