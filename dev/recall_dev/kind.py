"""A kind cluster for the pod tests: made, checked and removed without a trace, offline.

    with kind_cluster("recall-e2e", workdir, archives=[...], mounts=[media]) as cluster:
        cluster.kubeconfig      # https://127.0.0.1:<port>, the only way in from the host

Contract:
- The daemon is recall_dev.docker's KIND_DAEMON (a private dockerd: no iptables rules, no
  NAT, no forwarding on the host, docker-proxy publishing 127.0.0.1 ports), or the default
  daemon where one answers. kind itself is built from sigs.k8s.io/kind (build.sh --with-kind).
- The node image is recall.local/kind-node:v<kube> (recall_dev.kind_image, built when its
  inputs changed), or `KIND_NODE_IMAGE` (e.g. the upstream kindest/node where a registry is
  reachable; it is pulled by kind when missing).
- The cluster runs on a docker network this module creates for it (KIND_EXPERIMENTAL_DOCKER_
  NETWORK): a bridge without masquerading, labelled, removed afterwards (kind's own `kind`
  network would outlive `kind delete`). One node; the media directories are mounted read-only
  at the same path; the kubelet allows cgroup v1 (kubelet 1.37 refuses it by default).
- PersistentVolumeClaims: kind's fallback StorageClass `standard` (kubernetes.io/host-path),
  provisioned by kube-controller-manager's built-in hostPath provisioner, which kind's
  kubeadm config enables; volumes are directories of the node under /tmp/hostpath_pv. (The
  upstream image brings its local-path provisioner instead.)
- Before it yields: the node is Ready, CoreDNS is available, `archives` (image archives, as
  `docker save` or OCI) are loaded with `kind load image-archive`, and the node's egress guard
  is checked (`check_guard`, which reads rules and sends nothing).
- Afterwards, whatever happened: the cluster is deleted (its containers and their volumes),
  the network removed, a /lib/modules that docker made on the host for kind's mount removed,
  and `leftovers()` must come back empty (no container or network of it, no volume left
  dangling that was not before), else it raises. There is no "keep": on the private daemon a
  cluster cannot outlive the block that runs the daemon.
Each step says one line (recall_dev.buildlog); kind's output is in the log.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from recall_dev import kind_image
from recall_dev.buildlog import Step, build_step
from recall_dev.docker import KIND_DAEMON, DockerEngine, docker_engine

NETWORK_LABEL = "dev.recall.kind-network"
CLUSTER_LABEL = "io.x-k8s.kind.cluster"  # what kind labels its node containers with
HOST_MODULES = Path("/lib/modules")  # kind mounts it into every node; docker makes it if absent
# The only filter rules that may accept a packet in the node: kube-proxy's, for traffic it
# DNATed (marked 0x4000) or replies. Anything else would open a way out past the guard.
ALLOWED_ACCEPTS = (
    '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" '
    "-m mark --mark 0x4000/0x4000 -j ACCEPT",
    '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" '
    "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
)


class KindError(RuntimeError):
    """The kind cluster could not be made, checked or removed cleanly."""


@dataclass
class KindCluster:
    """A running kind cluster and the tools to reach it."""

    name: str
    kubeconfig: Path
    bin_dir: Path
    docker: DockerEngine
    node_image: str

    @property
    def node(self) -> str:
        """The node container (one node: the control plane)."""
        return f"{self.name}-control-plane"

    def exec(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a command in the node container."""
        return self.docker.run(["exec", self.node, *args], capture=True, check=check)

    def kill_container(self, container_id: str) -> None:
        """SIGKILL a container of a pod, through the node's containerd."""
        self.exec("ctr", "-n", "k8s.io", "tasks", "kill", "--signal", "SIGKILL", container_id)

    def kubectl(self, *args: str) -> str:
        done = subprocess.run(
            [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode != 0:
            raise KindError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout


def cluster_config(mounts: Sequence[Path]) -> dict[str, object]:
    """kind's Cluster config: one node, the mounts read-only at the same path, cgroup v1 ok."""
    node: dict[str, object] = {"role": "control-plane"}
    if mounts:
        node["extraMounts"] = [
            {"hostPath": str(m), "containerPath": str(m), "readOnly": True} for m in mounts
        ]
    return {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "networking": {"apiServerAddress": "127.0.0.1"},
        "kubeadmConfigPatches": ["kind: KubeletConfiguration\nfailCgroupV1: false\n"],
        "nodes": [node],
    }


def network_name(cluster: str) -> str:
    return f"recall-kind-{cluster}"


def _bridge_name(cluster: str) -> str:
    """A Linux interface name (15 bytes at most) that says whose it is."""
    return "rkind-" + hashlib.sha256(cluster.encode()).hexdigest()[:8]


def _kind_env(docker: DockerEngine, network: str) -> dict[str, str]:
    env = docker.env()
    env["KIND_EXPERIMENTAL_DOCKER_NETWORK"] = network
    # kind runs `docker` from PATH: the same client as ours.
    env["PATH"] = f"{Path(docker.cli).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def create_network(docker: DockerEngine, cluster: str, step: Step) -> str:
    network = network_name(cluster)
    step.run(
        [docker.cli, "network", "create", "--driver=bridge", f"--label={NETWORK_LABEL}={cluster}",
         "--opt=com.docker.network.bridge.enable_ip_masquerade=false",
         f"--opt=com.docker.network.bridge.name={_bridge_name(cluster)}", network],
        env=docker.env(),
    )  # fmt: skip
    return network


def check_guard(cluster: KindCluster) -> None:
    """The node's egress guard holds: RECALL-GUARD ends in REJECT and is jumped to from OUTPUT
    and FORWARD, and no filter rule accepts anything but kube-proxy's DNATed or replied
    traffic. Reads rules only: nothing is sent."""
    for tool in ("iptables", "ip6tables"):
        rules = cluster.exec(tool, "-w", "-S").stdout.splitlines()
        chain = [r for r in rules if r.startswith("-A RECALL-GUARD ")]
        if not chain or not chain[-1].startswith("-A RECALL-GUARD -j REJECT"):
            raise KindError(f"{tool}: the node's RECALL-GUARD chain does not end in REJECT")
        for hook in ("OUTPUT", "FORWARD"):
            if f"-A {hook} -j RECALL-GUARD" not in rules:
                raise KindError(f"{tool}: {hook} does not jump to RECALL-GUARD")
        accepts = [r for r in rules if r.endswith("-j ACCEPT") and r not in ALLOWED_ACCEPTS]
        if accepts:
            raise KindError(f"{tool}: rules that would accept past the guard: {accepts}")


def _wait_ready(cluster: KindCluster, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            cluster.kubectl(
                "-n", "kube-system", "wait", "--for=condition=Available", "deployment/coredns",
                "--timeout=10s",
            )  # fmt: skip
            return
        except KindError:
            if time.monotonic() > deadline:
                raise


def _ids(docker: DockerEngine, *args: str) -> list[str]:
    return docker.run([*args, "-q"], capture=True).stdout.split()


def leftovers(docker: DockerEngine, cluster: str, volumes_before: set[str]) -> list[str]:
    """What of this cluster still exists: containers, the network, volumes left dangling."""
    found = [
        f"container {c}"
        for c in _ids(docker, "ps", "-a", "--filter", f"label={CLUSTER_LABEL}={cluster}")
    ]
    found += [
        f"network {n}"
        for n in _ids(docker, "network", "ls", "--filter", f"label={NETWORK_LABEL}={cluster}")
    ]
    dangling = set(_ids(docker, "volume", "ls", "--filter", "dangling=true"))
    found += [f"volume {v}" for v in sorted(dangling - volumes_before)]
    return found


def delete(
    docker: DockerEngine,
    bin_dir: Path,
    cluster: str,
    *,
    modules_made: bool,
    volumes_before: set[str],
) -> None:
    """Delete the cluster and its network; raise KindError if anything of it is left."""
    with build_step(
        "kind", f"cluster {cluster}", verb="delete", past="deleted", append=True
    ) as step:
        env = _kind_env(docker, network_name(cluster))
        with contextlib.suppress(Exception):
            step.run([str(bin_dir / "kind"), "delete", "cluster", "--name", cluster], env=env)
        label = f"label={NETWORK_LABEL}={cluster}"
        for network in _ids(docker, "network", "ls", "--filter", label):
            step.run([docker.cli, "network", "rm", network], env=docker.env())
        if modules_made:
            with contextlib.suppress(OSError):
                HOST_MODULES.rmdir()
        left = leftovers(docker, cluster, volumes_before)
        if left:
            raise KindError(f"kind cluster {cluster} left behind: {', '.join(left)}")


@contextlib.contextmanager
def kind_cluster(
    name: str,
    workdir: Path,
    *,
    archives: Sequence[Path] = (),
    mounts: Sequence[Path] = (),
    timeout: float = 240,
) -> Iterator[KindCluster]:
    """A kind cluster for the duration of the block (see the module contract)."""
    workdir.mkdir(parents=True, exist_ok=True)
    bin_dir = kind_image.kind_tools()
    with docker_engine(progress=False, daemon=KIND_DAEMON) as docker:
        volumes_before = set(_ids(docker, "volume", "ls", "--filter", "dangling=true"))
        if leftovers(docker, name, volumes_before):  # a killed run's
            delete(docker, bin_dir, name, modules_made=False, volumes_before=volumes_before)
        node_image = os.environ.get("KIND_NODE_IMAGE") or kind_image.build(docker)
        modules_made = not HOST_MODULES.exists()
        cluster = KindCluster(name, workdir / "kubeconfig", bin_dir, docker, node_image)
        try:
            _create(cluster, archives, mounts, timeout)
            yield cluster
        finally:
            delete(docker, bin_dir, name, modules_made=modules_made, volumes_before=volumes_before)


def _create(
    cluster: KindCluster, archives: Sequence[Path], mounts: Sequence[Path], timeout: float
) -> None:
    docker = cluster.docker
    with build_step(
        "kind", f"cluster {cluster.name} ({cluster.node_image})", verb="create", past="created"
    ) as step:
        network = create_network(docker, cluster.name, step)
        config = cluster.kubeconfig.parent / "kind.yaml"
        config.write_text(yaml.safe_dump(cluster_config(mounts), sort_keys=False))
        kind = str(cluster.bin_dir / "kind")
        env = _kind_env(docker, network)
        step.run(
            [kind, "create", "cluster", "--name", cluster.name, "--image", cluster.node_image,
             "--config", str(config), "--kubeconfig", str(cluster.kubeconfig),
             "--wait", f"{int(timeout)}s"],
            env=env,
        )  # fmt: skip
        for archive in archives:
            step.run([kind, "load", "image-archive", str(archive), "--name", cluster.name], env=env)
        _wait_ready(cluster, timeout)
        if not os.environ.get("KIND_NODE_IMAGE"):
            check_guard(cluster)
        server = yaml.safe_load(cluster.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        if not str(server).startswith("https://127.0.0.1:"):
            raise KindError(f"the API server is not published on loopback: {server}")
        step.write(json.dumps({"server": server, "network": network}))
        step.note(f"{len(archives)} images loaded, API server {server}")
