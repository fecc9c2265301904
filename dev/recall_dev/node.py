"""One real Kubernetes node on this machine: containerd, kubelet and kube-scheduler as processes.

`recall dev up --node` and the pod end-to-end tests (tests/e2e/pods) run it next to the local
control plane (recall_dev.cluster). Pods run in real containers from images made here; the
network they get is recall_dev.node_net's, and no pod starts before its guard has passed.

What runs, all as children of the starting process:
- containerd (Debian's, 1.6) as a second containerd: its own root, state, socket and config;
  CRI on, cgroupfs, `restrict_oom_score_adj` (this host's root lacks CAP_SYS_RESOURCE, so runc
  cannot lower an OOM score), the pause image built here as sandbox image, CNI from
  /usr/lib/cni with the config node_net writes.
- kube-controller-manager with the controllers pods need beyond the control plane's own
  (Deployments and ReplicaSets, PodDisruptionBudgets, the `kube-root-ca.crt` publisher,
  ClusterRole aggregation, node lifecycle: it lifts the not-ready taint), and kube-scheduler.
- kubelet v1.37 registered as node `127.0.0.1` (`--hostname-override`: the API server reaches
  its logs and exec endpoints on loopback), cgroup v1 allowed (`failCgroupV1: false`), every
  path under the node's work directory, pod cgroups under `/recall-node`, no image garbage
  collection (images cannot be pulled back), pods with no nameserver.
- It authenticates as the ServiceAccount kube-system/recall-node bound to `system:node`.
- A ValidatingAdmissionPolicy refuses hostNetwork pods, which would bypass the pod network.
- recall_dev.node_dns answers the cluster's own names (kubernetes.default.svc) on the pod
  bridge as the kubelet's clusterDNS; it never forwards a query.

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
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from recall_dev import node_net
from recall_dev.cluster import ControlPlane, free_port, tools_bin_dir
from recall_dev.docker import cache_root
from recall_dev.node_images import PAUSE_IMAGE, import_archive, pause_archive
from recall_dev.pki import kubeconfig_dict
from recall_dev.procs import Proc, die_with_parent, pid_alive, tail, terminate

NODE_NAME = "127.0.0.1"
CLUSTER_DOMAIN = "cluster.local"
STATE_DIR = Path("/run/recall-node")
STATE_FILE = STATE_DIR / "state.json"
CGROUP_ROOT = "recall-node"
CGROUP_FS = Path("/sys/fs/cgroup")
NODE_IDENTITY = "recall-node"  # ServiceAccount in kube-system, bound to system:node
NO_HOST_NETWORK_POLICY = "recall-dev-no-host-network"
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
NODE_CONTROLLERS = (
    "deployment-controller",
    "replicaset-controller",
    "disruption-controller",
    "root-ca-certificate-publisher-controller",
    "clusterrole-aggregation-controller",
    "node-lifecycle-controller",
    "pod-garbage-collector-controller",
)


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
    def containerd_socket(self) -> Path:
        return self.workdir / "containerd" / "containerd.sock"

    @property
    def logs_dir(self) -> Path:
        return self.workdir / "logs"

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
            _spawn_reaper(os.getpid())
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
        for tool in ("kubelet", "kube-scheduler", "kube-controller-manager", "pause", "kubectl"):
            if not (bin_dir / tool).exists():
                raise NodeError(f"{bin_dir / tool} is missing: run hack/k8s-tools/build.sh")
        for tool in ("containerd", "runc", "ctr", "iptables", "ip"):
            if shutil.which(tool) is None:
                raise NodeError(f"{tool} is not installed: run hack/install-system-deps.sh")
        if not (node_net.CNI_BIN_DIR / "bridge").exists():
            raise NodeError("CNI plugins are missing: run hack/install-system-deps.sh")
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        target = self._service_target(bin_dir)
        update_state(
            workdir=str(self.workdir),
            owner=os.getpid(),
            detached=not self.die_with_parent,
            sysctls=_read_sysctls(),
            chains=_existing_chains(),
            host_paths_absent=[p for p in HOST_PATHS if not Path(p).exists()],
        )

        say("starting containerd (CRI)")
        self._start_containerd()
        import_archive(self.containerd_socket, self._pause_archive(bin_dir))

        say("setting up the pod network")
        node_net.setup(target)
        conflist = node_net.write_cni_config(
            self.workdir / "cni" / "net.d", self.workdir / "cni" / "ipam", target
        )
        for fact in node_net.verify_isolation(conflist, target):
            say(f"isolation: {fact}")
        self._apply_cluster_objects(bin_dir)
        say(f"starting the cluster DNS on {node_net.GATEWAY}:53 (cluster names only)")
        self._spawn("node-dns", self._dns_args(target))

        say("starting kube-controller-manager (node controllers) and kube-scheduler")
        self._spawn("kube-controller-manager-node", self._kcm_args(bin_dir))
        self._spawn("kube-scheduler", self._scheduler_args(bin_dir))
        say(f"starting kubelet as node {NODE_NAME}")
        _make_cgroup_root()
        self._spawn("kubelet", self._kubelet_args(bin_dir))
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

    def _containerd_config(self) -> Path:
        root = self.workdir / "containerd"
        config = f"""version = 2
root = "{root / "root"}"
state = "{root / "state"}"
disabled_plugins = [
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing",
]

[grpc]
  address = "{self.containerd_socket}"

[ttrpc]
  address = "{root / "containerd.sock.ttrpc"}"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{root / "opt"}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  enable_selinux = false
  disable_apparmor = true
  enable_unprivileged_ports = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{root / "runc"}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{node_net.CNI_BIN_DIR}"
    conf_dir = "{self.workdir / "cni" / "net.d"}"
    max_conf_num = 1
"""
        path = root / "config.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(config)
        return path

    def _start_containerd(self) -> None:
        config = self._containerd_config()
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

    # -- cluster objects -----------------------------------------------------------------------

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
        objects = [
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": NODE_IDENTITY, "namespace": "kube-system"},
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "recall-dev:node"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "system:node",
                },
                "subjects": [
                    {"kind": "ServiceAccount", "name": NODE_IDENTITY, "namespace": "kube-system"}
                ],
            },
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": NO_HOST_NETWORK_POLICY},
                "spec": {
                    "failurePolicy": "Fail",
                    "matchConstraints": {
                        "resourceRules": [
                            {
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "operations": ["CREATE", "UPDATE"],
                                "resources": ["pods"],
                            }
                        ]
                    },
                    "validations": [
                        {
                            "expression": "!has(object.spec.hostNetwork) || "
                            "!object.spec.hostNetwork",
                            "message": "hostNetwork pods would bypass the local node's isolated "
                            "pod network (recall_dev.node_net)",
                        }
                    ],
                },
            },
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": NO_HOST_NETWORK_POLICY},
                "spec": {
                    "policyName": NO_HOST_NETWORK_POLICY,
                    "validationActions": ["Deny"],
                },
            },
        ]
        manifest = yaml.safe_dump_all(objects)
        self._kubectl(bin_dir, "apply", "-f", "-", stdin=manifest)
        token = self._kubectl(
            bin_dir, "create", "token", NODE_IDENTITY, "-n", "kube-system", "--duration=48h"
        ).strip()
        config = kubeconfig_dict(
            self.cp.server,
            self.cp.pki.ca_cert.read_bytes(),
            token=token,
            user=NODE_IDENTITY,
            context="recall-node",
        )
        path = self.workdir / "kubelet" / "kubeconfig"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)

    # -- the Kubernetes processes --------------------------------------------------------------

    def _kcm_args(self, bin_dir: Path) -> list[str]:
        kc = str(self.kubeconfig)
        return [
            str(bin_dir / "kube-controller-manager"),
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            f"--controllers={','.join(NODE_CONTROLLERS)}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            f"--cert-dir={self.workdir / 'kcm-certs'}",
            f"--root-ca-file={self.cp.pki.ca_cert}",
            "--use-service-account-credentials=false",
            "--node-monitor-period=2s",
            "--v=1",
        ]

    def _scheduler_args(self, bin_dir: Path) -> list[str]:
        kc = str(self.kubeconfig)
        return [
            str(bin_dir / "kube-scheduler"),
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            "--v=1",
        ]

    def _dns_args(self, target: node_net.ServiceTarget) -> list[str]:
        record = f"kubernetes.default.svc.{CLUSTER_DOMAIN}={target.service_ip}"
        return [
            sys.executable, "-m", "recall_dev.node_dns", f"--listen={node_net.GATEWAY}",
            f"--domain={CLUSTER_DOMAIN}", f"--record={record}",
        ]  # fmt: skip

    def _kubelet_config(self) -> Path:
        kubelet_dir = self.workdir / "kubelet"
        resolv = kubelet_dir / "resolv.conf"
        resolv.parent.mkdir(parents=True, exist_ok=True)
        # For dnsPolicy Default: no nameserver at all. ClusterFirst pods ask node_dns, which
        # knows the cluster's names only and never forwards.
        resolv.write_text("# recall dev node: no upstream nameserver\noptions ndots:1\n")
        self.kubelet_port = self.kubelet_port or free_port()
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": "127.0.0.1",
            "port": self.kubelet_port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": free_port(),
            "authentication": {
                "anonymous": {"enabled": True},
                "webhook": {"enabled": False},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{CGROUP_ROOT}",
            "cgroupsPerQOS": True,
            "failCgroupV1": False,
            "failSwapOn": False,
            "oomScoreAdj": 0,
            "podLogsDir": str(self.workdir / "pod-logs"),
            "resolvConf": str(resolv),
            "clusterDNS": [str(node_net.GATEWAY)],
            "clusterDomain": CLUSTER_DOMAIN,
            "volumePluginDir": str(self.workdir / "volume-plugins"),
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "nodefs.inodesFree": "1%",
                "imagefs.available": "1%",
            },
            "maxPods": 30,
            "registerNode": True,
            "shutdownGracePeriod": "0s",
            "shutdownGracePeriodCriticalPods": "0s",
            "nodeStatusUpdateFrequency": "2s",
            "syncFrequency": "5s",
            "fileCheckFrequency": "5s",
            "localStorageCapacityIsolation": True,
        }
        path = kubelet_dir / "config.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def _kubelet_args(self, bin_dir: Path) -> list[str]:
        config = self._kubelet_config()
        return [
            str(bin_dir / "kubelet"),
            f"--config={config}",
            f"--kubeconfig={self.workdir / 'kubelet' / 'kubeconfig'}",
            f"--root-dir={self.workdir / 'kubelet' / 'root'}",
            f"--cert-dir={self.workdir / 'kubelet' / 'pki'}",
            f"--hostname-override={NODE_NAME}",
            "--v=1",
        ]

    def _spawn(self, name: str, args: list[str]) -> None:
        log = self.logs_dir / f"{name}.log"
        with log.open("ab") as out:
            popen = subprocess.Popen(
                args,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.workdir,
                start_new_session=True,
                preexec_fn=die_with_parent if self.die_with_parent else None,
            )
        self.procs.append(Proc(name, popen, log, popen.pid))
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


# -- the reaper ---------------------------------------------------------------------------------


def _spawn_reaper(owner: int) -> None:
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


# -- machine state -----------------------------------------------------------------------------


def read_state() -> dict[str, object] | None:
    try:
        state: dict[str, object] = json.loads(STATE_FILE.read_text())
        return state
    except (OSError, ValueError):
        return None


def update_state(**fields: object) -> None:
    state = read_state() or {}
    state.update(fields)
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    tmp = STATE_FILE.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    tmp.rename(STATE_FILE)


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
            if state is None or not _in_use(state):
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


def _in_use(state: dict[str, object]) -> bool:
    """Whether the node of `state` still has an owner: a live starting process, or (detached,
    `recall dev up --node`) a live node process."""
    owner = int(str(state.get("owner", 0)))
    if owner == os.getpid():
        return False
    if state.get("detached"):
        procs = state.get("processes", {})
        return isinstance(procs, dict) and any(pid_alive(int(p)) for p in procs.values())
    return pid_alive(owner)


def _read_sysctls() -> dict[str, str]:
    values: dict[str, str] = {}
    for key in KUBELET_SYSCTLS:
        with contextlib.suppress(OSError):
            values[key] = (Path("/proc/sys") / key).read_text().strip()
    return values


def _existing_chains() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for table, chains in KUBELET_CHAINS.items():
        listing = subprocess.run(
            ["iptables", "-w", "-t", table, "-S"], capture_output=True, text=True
        ).stdout
        found[table] = [c for c in chains if f"-N {c}" in listing]
    return found


# -- teardown ----------------------------------------------------------------------------------


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


def _wait_no_containers(workdir: Path, timeout: float) -> None:
    socket = workdir / "containerd" / "containerd.sock"
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


def _cgroup_dirs() -> list[Path]:
    """Every cgroup directory of the node, deepest first, across all v1 hierarchies."""
    dirs: list[Path] = []
    if not CGROUP_FS.is_dir():
        return dirs
    for hierarchy in CGROUP_FS.iterdir():
        top = hierarchy / CGROUP_ROOT
        if top.is_dir():
            dirs.extend(p for p in top.rglob("*") if p.is_dir())
            dirs.append(top)
    return sorted(dirs, key=lambda p: len(p.parts), reverse=True)


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
    socket = str(workdir / "containerd" / "containerd.sock").encode()
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


def _remove_cni_results(workdir: Path) -> list[str]:
    """The CNI library's cached results of this node's pod sandboxes (a sandbox whose CNI DEL
    never ran, because containerd died first, leaves one per network, loopback included)."""
    sandboxes = workdir / "containerd" / "root" / "io.containerd.grpc.v1.cri" / "sandboxes"
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


def _restore_sysctls(saved: object) -> None:
    if not isinstance(saved, dict):
        return
    for key, value in saved.items():
        path = Path("/proc/sys") / str(key)
        with contextlib.suppress(OSError):
            if path.read_text().strip() != value:
                path.write_text(f"{value}\n")


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


if __name__ == "__main__":
    raise SystemExit(main())
