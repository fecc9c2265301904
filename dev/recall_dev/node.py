"""One real Kubernetes node on this machine, started and stopped: containerd, kubelet and
kube-scheduler as processes.

`recall dev up --node` and the pod end-to-end tests (tests/e2e/pods) run it next to the local
control plane (recall_dev.cluster). Pods run in real containers from images made here; the
network they get is recall_dev.node_net's, and no pod starts before its guard has passed.

What runs, all as children of the starting process (what each is given, and why, is
recall_dev.node_config's):
- containerd (Debian's, 1.6) as a second containerd, with CRI and the pod network's CNI config.
- kube-controller-manager with the controllers pods need beyond the control plane's own, and
  kube-scheduler.
- kubelet v1.37 registered as node `127.0.0.1`, authenticated as the ServiceAccount
  kube-system/recall-node bound to `system:node`.
- A ValidatingAdmissionPolicy refuses hostNetwork pods, which would bypass the pod network.
- recall_dev.node_dns answers the cluster's own names (kubernetes.default.svc) on the pod
  bridge as the kubelet's clusterDNS; it never forwards a query.

This module holds `Node.start()` / `Node.stop()` and claiming the machine; the state file is
recall_dev.node_state's, `teardown()` and the reaper are recall_dev.node_teardown's.

Contract:
- `start()` returns when the node is Ready and untainted, or raises `NodeError` after
  cleaning up what it made. `stop()` / `teardown()` remove everything: processes (containers
  and shims included), mounts, pod network namespaces, the bridge and NAT rules, cgroups, the
  host sysctls the kubelet changes (restored to their values before start), CNI caches and the
  work directory. Both are idempotent.
- One node per machine: its state lives in /run/recall-node/state.json from the first thing
  made, so `teardown()` works from that file alone — after the starting process was killed,
  or from `recall dev down` in another shell. A start finds a stale state (its owner dead) and
  tears it down first; while the owner lives it waits (`wait_for_machine`, so concurrent test
  runs take turns) or refuses.
- Children get SIGKILL when the starting process dies (PR_SET_PDEATHSIG) unless started
  detached (`recall dev up --node`). What they would leave (containers and their shims,
  mounts, rules) is removed by a reaper: a small process outside the owner's process group
  that waits for the owner to exit and runs `teardown()` if the owner did not stop the node
  (`python -m recall_dev.node reap`). `recall dev down` (or `python -m recall_dev.node down`)
  does the same by hand.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from recall_dev import node_net
from recall_dev.cluster import ControlPlane, free_port, tools_bin_dir
from recall_dev.docker import cache_root
from recall_dev.node_config import (
    CGROUP_FS,
    CGROUP_ROOT,
    NODE_IDENTITY,
    NODE_NAME,
    RESOLV_CONF,
    Layout,
    cluster_objects,
    containerd_config,
    controller_manager_args,
    dns_args,
    kubelet_args,
    kubelet_config,
    kubelet_kubeconfig,
    scheduler_args,
)
from recall_dev.node_images import import_archive, pause_archive
from recall_dev.node_state import in_use, read_state, update_state
from recall_dev.node_teardown import host_snapshot, reap, spawn_reaper, teardown
from recall_dev.procs import Proc, spawn, tail


class NodeError(RuntimeError):
    """The node could not be started (or another node owns this machine)."""


@dataclass
class Node:
    """The node of one control plane; `workdir` holds everything it writes (besides /run)."""

    cp: ControlPlane
    workdir: Path
    die_with_parent: bool = True
    procs: list[Proc] = field(default_factory=list)
    kubelet_port: int = 0

    # -- paths ---------------------------------------------------------------------------------

    @property
    def layout(self) -> Layout:
        return Layout(self.workdir)

    @property
    def containerd_socket(self) -> Path:
        return self.layout.containerd_socket

    @property
    def logs_dir(self) -> Path:
        return self.layout.logs_dir

    @property
    def kubeconfig(self) -> Path:
        return self.cp.kubeconfig

    # -- start ---------------------------------------------------------------------------------

    def start(
        self,
        progress: Callable[[str], None] | None = None,
        timeout: float = 180,
        wait_for_machine: float = 0.0,
    ) -> None:
        """Start the node (see the module contract). `wait_for_machine`: how long to wait while
        another node holds this machine before giving up."""
        say = progress or (lambda _m: None)
        claim_machine(self.workdir, wait=wait_for_machine)
        if self.die_with_parent:
            spawn_reaper(os.getpid())
        try:
            self._start(say, timeout)
        except BaseException:
            kept = self._keep_logs()
            self.stop()
            if kept:
                say(f"node logs kept in {kept}")
            raise

    def _start(self, say: Callable[[str], None], timeout: float) -> None:
        bin_dir = self.cp.bin_dir or tools_bin_dir(build=True)
        _check_tools(bin_dir)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        target = self._service_target(bin_dir)
        update_state(
            workdir=str(self.workdir),
            owner=os.getpid(),
            detached=not self.die_with_parent,
            **host_snapshot(),
        )

        say("starting containerd (CRI)")
        self._start_containerd()
        import_archive(self.containerd_socket, self._pause_archive(bin_dir))

        say("setting up the pod network")
        node_net.setup(target)
        conflist = node_net.write_cni_config(
            self.layout.cni_conf_dir, self.layout.cni_ipam_dir, target
        )
        for fact in node_net.verify_isolation(conflist, target):
            say(f"isolation: {fact}")
        self._apply_cluster_objects(bin_dir)
        self._write_kubelet_kubeconfig(bin_dir)
        say(f"starting the cluster DNS on {node_net.GATEWAY}:53 (cluster names only)")
        self._spawn("node-dns", dns_args(target.service_ip, self.kubeconfig))

        say("starting kube-controller-manager (node controllers) and kube-scheduler")
        self._spawn(
            "kube-controller-manager-node",
            controller_manager_args(
                bin_dir, self.kubeconfig, self.cp.pki.ca_cert, self.layout, free_port()
            ),
        )
        self._spawn("kube-scheduler", scheduler_args(bin_dir, self.kubeconfig, free_port()))
        say(f"starting kubelet as node {NODE_NAME}")
        _make_cgroup_root()
        self._write_kubelet_config()
        self._spawn("kubelet", kubelet_args(bin_dir, self.layout))
        self._wait_ready(bin_dir, timeout)
        say("node Ready")

    def _service_target(self, bin_dir: Path) -> node_net.ServiceTarget:
        """The `kubernetes` Service's address (what pods dial) and the API server's port.

        The API server creates that Service shortly after it is ready: wait for it.
        """
        deadline = time.monotonic() + 60
        problem = ""
        while time.monotonic() < deadline:
            try:
                ip = self._kubectl(
                    bin_dir, "get", "service", "kubernetes", "-n", "default", "-o",
                    "jsonpath={.spec.clusterIP} {.spec.ports[0].port}",
                ).split()  # fmt: skip
                if len(ip) == 2:
                    return node_net.ServiceTarget(ip[0], int(ip[1]), self.cp.apiserver_port)
            except NodeError as e:
                problem = str(e)
            time.sleep(0.5)
        raise NodeError(f"no `kubernetes` Service after 60 s {problem}".strip())

    def _pause_archive(self, bin_dir: Path) -> Path:
        out = cache_root() / "image" / "pause-oci.tar"
        out.parent.mkdir(parents=True, exist_ok=True)
        return pause_archive(bin_dir / "pause", out)

    # -- containerd ----------------------------------------------------------------------------

    def _start_containerd(self) -> None:
        config = self.layout.containerd_config
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(containerd_config(self.layout))
        self._spawn("containerd", ["containerd", "--config", str(config)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            done = subprocess.run(
                ["ctr", "--address", str(self.containerd_socket), "version"], capture_output=True
            )
            if done.returncode == 0:
                return
            self._check_alive()
            time.sleep(0.2)
        raise NodeError(
            f"containerd did not answer; log:\n{tail(self.logs_dir / 'containerd.log')}"
        )

    # -- cluster objects and the kubelet's files -----------------------------------------------

    def _kubectl(self, bin_dir: Path, *args: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            [str(bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise NodeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def _apply_cluster_objects(self, bin_dir: Path) -> None:
        """The node's identity and RBAC, and the policy refusing hostNetwork pods."""
        manifest = yaml.safe_dump_all(cluster_objects())
        self._kubectl(bin_dir, "apply", "-f", "-", stdin=manifest)

    def _write_kubelet_kubeconfig(self, bin_dir: Path) -> None:
        """The kubelet's kubeconfig, with a 48 h token of the node's ServiceAccount."""
        token = self._kubectl(
            bin_dir, "create", "token", NODE_IDENTITY, "-n", "kube-system", "--duration=48h"
        ).strip()
        path = self.layout.kubelet_kubeconfig
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(kubelet_kubeconfig(self.cp.server, self.cp.pki.ca_cert, token))
        path.chmod(0o600)

    def _write_kubelet_config(self) -> None:
        """The kubelet's config file and the resolv.conf it gives pods; picks its ports."""
        layout = self.layout
        layout.resolv_conf.parent.mkdir(parents=True, exist_ok=True)
        layout.resolv_conf.write_text(RESOLV_CONF)
        self.kubelet_port = self.kubelet_port or free_port()
        layout.kubelet_config.write_text(
            kubelet_config(layout, self.kubelet_port, healthz_port=free_port())
        )

    # -- the processes -------------------------------------------------------------------------

    def _spawn(self, name: str, args: list[str]) -> None:
        self.procs.append(
            spawn(name, args, self.logs_dir, self.workdir, owned=self.die_with_parent)
        )
        update_state(processes={p.name: p.pid for p in self.procs})

    def _check_alive(self) -> None:
        for p in self.procs:
            if not p.alive():
                raise NodeError(f"{p.name} exited; last lines of {p.log}:\n{tail(p.log)}")

    def _wait_ready(self, bin_dir: Path, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            self._check_alive()
            with contextlib.suppress(NodeError):
                last = self._kubectl(
                    bin_dir, "get", "node", NODE_NAME, "-o",
                    'jsonpath={.status.conditions[?(@.type=="Ready")].status} '
                    "{.spec.taints[*].key}",
                ).strip()  # fmt: skip
                if last == "True":
                    return
            time.sleep(0.5)
        raise NodeError(
            f"node {NODE_NAME} not Ready and untainted after {timeout:.0f} s ({last!r}); "
            f"kubelet log:\n{tail(self.logs_dir / 'kubelet.log')}"
        )

    # -- stop ----------------------------------------------------------------------------------

    def _keep_logs(self) -> Path | None:
        if not self.logs_dir.exists():
            return None
        kept = Path(tempfile.mkdtemp(prefix="recall-node-logs-"))
        shutil.copytree(self.logs_dir, kept, dirs_exist_ok=True)
        return kept

    def stop(self) -> None:
        """Delete the pods, stop every process, remove everything the node made."""
        teardown(graceful_kubeconfig=self.kubeconfig, bin_dir=self.cp.bin_dir)
        self.procs.clear()


def _check_tools(bin_dir: Path) -> None:
    """Raise `NodeError` naming the script that installs whatever the node needs and lacks."""
    for tool in ("kubelet", "kube-scheduler", "kube-controller-manager", "pause", "kubectl"):
        if not (bin_dir / tool).exists():
            raise NodeError(f"{bin_dir / tool} is missing: run hack/k8s-tools/build.sh")
    for tool in ("containerd", "runc", "ctr", "iptables", "ip"):
        if shutil.which(tool) is None:
            raise NodeError(f"{tool} is not installed: run hack/install-system-deps.sh")
    if not (node_net.CNI_BIN_DIR / "bridge").exists():
        raise NodeError("CNI plugins are missing: run hack/install-system-deps.sh")


def _make_cgroup_root() -> None:
    """The kubelet's cgroupRoot must exist in every hierarchy; cpuset needs its CPUs and mems."""
    for hierarchy in CGROUP_FS.iterdir():
        if not (hierarchy / "cgroup.procs").exists() or (hierarchy / "cgroup.controllers").exists():
            continue  # not a v1 hierarchy (the unified one holds no controller here)
        top = hierarchy / CGROUP_ROOT
        top.mkdir(exist_ok=True)
        for knob in ("cpuset.cpus", "cpuset.mems"):
            if (hierarchy / knob).exists():
                (top / knob).write_text((hierarchy / knob).read_text())


# -- the machine -------------------------------------------------------------------------------


def claim_machine(workdir: Path, wait: float = 0.0) -> None:
    """Make this process the node's owner, waiting up to `wait` seconds while another live
    node (a test run's, or a detached one) holds the machine; a stale node is torn down."""
    deadline = time.monotonic() + wait
    lock_path = cache_root() / "node.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        with lock_path.open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = read_state()
            if state is None or not in_use(state):
                if state is not None:
                    teardown()
                workdir.mkdir(parents=True, exist_ok=True)
                update_state(workdir=str(workdir), owner=os.getpid())
                return
        if time.monotonic() >= deadline:
            raise NodeError(
                f"a node of pid {state.get('owner')} runs on this machine "
                f"({state.get('workdir')}); stop it with `recall dev down` first"
            )
        time.sleep(2)


# -- python -m recall_dev.node -----------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m recall_dev.node")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("reap", help="tear the node down when OWNER exits").add_argument(
        "--owner", type=int, required=True
    )
    sub.add_parser("down", help="tear down the node of this machine (from its state file)")
    args = parser.parse_args(argv)
    removed = reap(args.owner) if args.command == "reap" else teardown()
    print(f"{len(removed)} things removed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
