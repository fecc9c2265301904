"""kind clusters of several nodes, offline: made, checked, drilled and removed without a trace.

    with kind_cluster("recall-e2e", workdir, workers=2, archives=[...], mounts=[media]) as c:
        c.kubeconfig          # https://127.0.0.1:<port>, the only way in from the host
        c.kill_node(c.workers[0]); c.start_node(c.workers[0])     # drills
        c.cut(c.workers[1]); c.heal(c.workers[1])

Contract:
- The daemon is recall_dev.docker's KIND_DAEMON (a private dockerd: no iptables rules, no
  NAT, no forwarding on the host, docker-proxy publishing 127.0.0.1 ports), or the default
  daemon where one answers; `recall dev up --kind` runs its cluster on KIND_DEV_DAEMON, which
  outlives the command (`create` and `delete` are the two halves of `kind_cluster`). kind is
  built from sigs.k8s.io/kind (build.sh --with-kind).
- The node image is recall.local/kind-node:v<kube> (recall_dev.kind_image, built when its
  inputs changed), or `KIND_NODE_IMAGE` (e.g. the upstream kindest/node where a registry is
  reachable; it is pulled by kind when missing).
- The cluster runs on a docker network this module creates for it (KIND_EXPERIMENTAL_DOCKER_
  NETWORK): a bridge without masquerading, labelled, removed afterwards (kind's own `kind`
  network would outlive `kind delete`). One control-plane node and `workers` worker nodes
  (kind names them `<name>-control-plane`, `<name>-worker`, `<name>-worker2`, ...); the
  control plane takes pods too (its taint is removed). The nodes find each other by name
  through Docker's resolver; each routes the others' pods (the node image's pod network);
  CoreDNS answers the cluster's names and forwards nothing (`forward` removed from its
  Corefile: the node's resolver, 127.0.0.11, would be CoreDNS itself inside its pod). The
  media directories are mounted read-only at the same path in every node; the kubelet allows
  cgroup v1 (kubelet 1.37 refuses it by default).
- PersistentVolumeClaims: the default StorageClass `standard`, provisioned by
  local-path-provisioner (rancher.io/local-path, WaitForFirstConsumer), as in upstream kind's
  node image (hack/kind/node/rootfs/kind/manifests/default-storage.yaml): a claim is a
  directory of the node its first pod runs on (/var/local-path-provisioner/<pv>, mode 0777),
  and its PersistentVolume is pinned to that node (a volume's pod cannot move to another node:
  pin it where the drills never take a node away). The upstream image brings the same.
- Before it yields: every node is Ready, CoreDNS is available, `archives` (image archives, as
  `docker save` or OCI) are loaded into every node with `kind load image-archive`, and every
  node's egress guard is checked (`check_guard`, which reads rules and sends nothing).
- Drills act inside the docker network and the nodes' own namespaces only, never on the
  host's routes: `kill_node` is `docker kill` (every process of the node dies at once, its
  pods still shown Running until the node controller notices); `start_node` boots it again
  and waits until it is Ready with its guard in place; `cut` makes the node's own iptables
  drop every packet to and from the other nodes and their pods (its processes live on,
  talking to no one; the host's published port is not the node's), `heal` removes exactly
  that. `drill_leftovers` says what a drill left in the running cluster: a node not running,
  a container, network or dangling volume that was not there before, a RECALL-DRILL chain, a
  node cordoned.
- Afterwards, whatever happened: the cluster is deleted (its containers and their volumes),
  the network removed, a /lib/modules that docker made on the host for kind's mount removed,
  and `leftovers()` must come back empty (no container or network of it, no volume left
  dangling that was not before), else it raises.
Each step says one line (recall_dev.buildlog); kind's output is in the log.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import shlex
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from recall_dev import kind_image
from recall_dev.buildlog import BuildError, Step, build_step
from recall_dev.docker import KIND_DAEMON, DockerEngine, docker_engine

NETWORK_LABEL = "dev.recall.kind-network"
CLUSTER_LABEL = "io.x-k8s.kind.cluster"  # what kind labels its node containers with
HOST_MODULES = Path("/lib/modules")  # kind mounts it into every node; docker makes it if absent
CONTROL_PLANE_TAINT = "node-role.kubernetes.io/control-plane:NoSchedule-"
DRILL_CHAIN = "RECALL-DRILL"
DRILL_HOOKS = ("INPUT", "OUTPUT", "FORWARD")  # jumped to in this order
# The only filter rules that may accept a packet in the node: kube-proxy's, for traffic it
# DNATed (marked 0x4000) or replies. Anything else would open a way out past the guard.
ALLOWED_ACCEPTS = (
    '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" '
    "-m mark --mark 0x4000/0x4000 -j ACCEPT",
    '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" '
    "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
)


class KindError(RuntimeError):
    """The kind cluster could not be made, checked, drilled or removed cleanly."""


def node_names(cluster: str, workers: int) -> list[str]:
    """The node (and container) names kind gives: control-plane, worker, worker2, ..."""
    names = [f"{cluster}-control-plane"]
    names += [f"{cluster}-worker{i + 1 if i else ''}" for i in range(workers)]
    return names


@dataclass
class KindCluster:
    """A running kind cluster and the tools to reach it."""

    name: str
    kubeconfig: Path
    bin_dir: Path
    docker: DockerEngine
    node_image: str
    workers_count: int = 0

    @property
    def nodes(self) -> list[str]:
        return node_names(self.name, self.workers_count)

    @property
    def control_plane(self) -> str:
        return self.nodes[0]

    @property
    def workers(self) -> list[str]:
        return self.nodes[1:]

    def exec(
        self, *args: str, node: str = "", check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run a command in a node container (the control plane's by default)."""
        node = node or self.control_plane
        return self.docker.run(["exec", node, *args], capture=True, check=check)

    def kill_container(self, container_id: str) -> None:
        """SIGKILL a container of a pod, through the containerd of the node that runs it."""
        for node in self.nodes:
            done = self.exec(
                "ctr", "-n", "k8s.io", "tasks", "kill", "--signal", "SIGKILL", container_id,
                node=node, check=False,
            )  # fmt: skip
            if done.returncode == 0:
                return
        raise KindError(f"no node runs container {container_id}")

    def kubectl(self, *args: str) -> str:
        done = subprocess.run(
            [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode != 0:
            raise KindError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def load(self, archive: Path) -> None:
        """Load an image archive into every node (`kind load image-archive`)."""
        with build_step("kind", f"{archive.name} into {self.name}", verb="load", past="loaded",
                        append=True) as step:  # fmt: skip
            step.run(
                [str(self.bin_dir / "kind"), "load", "image-archive", str(archive),
                 "--name", self.name],
                env=_kind_env(self.docker, network_name(self.name)),
            )  # fmt: skip

    def node_ip(self, node: str) -> str:
        """The node's address on the cluster's docker network."""
        out = self.docker.run(
            ["inspect", "--format", "{{json .NetworkSettings.Networks}}", node], capture=True
        ).stdout
        networks = json.loads(out)
        return str(networks[network_name(self.name)]["IPAddress"])

    # -- drills ------------------------------------------------------------------------------

    def kill_node(self, node: str) -> None:
        """The node dies at once (`docker kill`: SIGKILL to its init, every process gone)."""
        self.docker.run(["kill", "--signal", "KILL", node], capture=True)

    def start_node(self, node: str, timeout: float = 240) -> None:
        """Boot a killed node again; returns once its egress guard is in place, its kubelet
        renewed its node Lease and its kube-proxy is Ready again, all after this start (the
        Node may still say Ready from before: the node controller notices a death late)."""
        started = dt.datetime.now(dt.UTC)
        self.docker.run(["start", node], capture=True)
        deadline = time.monotonic() + timeout
        while True:
            try:
                check_guard(self, node)
                if self._back_since(node, started):
                    return
            except (KindError, subprocess.CalledProcessError):
                pass
            if time.monotonic() > deadline:
                raise KindError(f"node {node} not back {timeout:.0f} s after its start")
            time.sleep(1)

    def _back_since(self, node: str, started: dt.datetime) -> bool:
        lease = self.kubectl("-n", "kube-node-lease", "get", "lease", node, "-o", "json")
        if _time(json.loads(lease)["spec"].get("renewTime")) <= started:
            return False
        proxies = self.kubectl(
            "-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-proxy",
            "--field-selector", f"spec.nodeName={node}", "-o", "json",
        )  # fmt: skip
        pods = json.loads(proxies)["items"]
        return any(
            c.get("type") == "Ready"
            and c.get("status") == "True"
            and _time(c.get("lastTransitionTime")) > started
            for pod in pods
            for c in pod.get("status", {}).get("conditions", [])
        )

    def cut_rules(self, node: str) -> list[tuple[str, ...]]:
        """The iptables rules of `cut`, in order: the RECALL-DRILL chain, a DROP to and from
        each other node and its pods, then the jumps to it from INPUT, OUTPUT and FORWARD. It
        reads the other nodes' addresses (docker) and, with `KIND_NODE_IMAGE`, their podCIDRs
        (the API server): make them ahead of a cut whose moment matters (they hold until a node
        is started again)."""
        others = [self.node_ip(n) for n in self.nodes if n != node]
        if os.environ.get("KIND_NODE_IMAGE"):  # another image's CNI follows the Nodes' podCIDR
            listed = json.loads(self.kubectl("get", "nodes", "-o", "json"))["items"]
            pods = {
                str(n["spec"]["podCIDR"])
                for n in listed
                if n["metadata"]["name"] != node and n["spec"].get("podCIDR")
            }
        else:  # this image's: by the node's address
            pods = {_pod_subnet(ip) for ip in others}
        rules: list[tuple[str, ...]] = [("-N", DRILL_CHAIN)]
        for peer in [*others, *sorted(pods)]:
            rules += [("-A", DRILL_CHAIN, "-d", peer, "-j", "DROP")]
            rules += [("-A", DRILL_CHAIN, "-s", peer, "-j", "DROP")]
        rules += [("-I", hook, "1", "-j", DRILL_CHAIN) for hook in DRILL_HOOKS]
        return rules

    def cut(self, node: str, rules: Sequence[tuple[str, ...]] = ()) -> None:
        """The node's own iptables drop every packet to and from the other nodes and their
        pods (INPUT, OUTPUT and FORWARD jump to RECALL-DRILL first): its processes live on,
        cut off from the API server and from everything else of the cluster.

        `rules` (`cut_rules`, made ahead; made here when empty) run in ONE `docker exec`, one
        shell that stops at the first rule that fails: the chain is filled first and the jumps
        come last, so nothing is dropped before the INPUT jump, a chain left half-filled is
        never jumped to, and the three jumps land within milliseconds of each other. The cut is
        complete when this returns (time a drill's fault from then); a busy machine delays it
        by one `docker exec`, not one per rule."""
        script = " && ".join(
            shlex.join(("iptables", "-w", *r)) for r in rules or self.cut_rules(node)
        )
        self.exec("sh", "-c", script, node=node)

    def heal(self, node: str) -> None:
        """Remove what `cut` added, and nothing else: every jump to RECALL-DRILL, then the
        chain (one `docker exec`; nothing to remove, or a node not running, is no error)."""
        self.exec("sh", "-c", heal_script(), node=node, check=False)

    def drill_leftovers(self, volumes_before: set[str]) -> list[str]:
        """What a drill left behind in the running cluster, each said in a few words: a node
        container missing or not running, a container or docker network of the cluster's labels
        that is not one of its own, a dangling volume that `volumes_before` (`dangling_volumes`
        before the drill) does not name, a node with a RECALL-DRILL chain, a node cordoned.
        Empty when the drill was undone."""
        label = f"label={CLUSTER_LABEL}={self.name}"
        containers = set(_names(self.docker, "ps", "-a", "--filter", label))
        running = set(_names(self.docker, "ps", "--filter", label, "--filter", "status=running"))
        found = [f"node {n} not running" for n in self.nodes if n in containers - running]
        found += [f"node {n} missing" for n in self.nodes if n not in containers]
        found += [f"container {c}" for c in sorted(containers - set(self.nodes))]
        networks = _names(
            self.docker, "network", "ls", "--filter", f"label={NETWORK_LABEL}={self.name}"
        )
        found += [f"network {n}" for n in networks if n != network_name(self.name)]
        found += [f"volume {v}" for v in sorted(dangling_volumes(self.docker) - volumes_before)]
        for node in sorted(running & set(self.nodes)):
            rules = self.exec("iptables", "-w", "-S", node=node).stdout.splitlines()
            if any(DRILL_CHAIN in rule for rule in rules):
                found.append(f"node {node}: iptables chain {DRILL_CHAIN}")
        listed = json.loads(self.kubectl("get", "nodes", "-o", "json"))["items"]
        found += [
            f"node {n['metadata']['name']} cordoned"
            for n in listed
            if (n.get("spec") or {}).get("unschedulable")
        ]
        return found


def heal_script() -> str:
    """The shell commands of `heal`: the jumps to RECALL-DRILL deleted from each hook while it
    has one, then the chain flushed and deleted."""
    lines = [
        f"while iptables -w -D {hook} -j {DRILL_CHAIN} 2>/dev/null; do :; done"
        for hook in DRILL_HOOKS
    ]
    lines += [
        f"iptables -w -F {DRILL_CHAIN} 2>/dev/null",
        f"iptables -w -X {DRILL_CHAIN} 2>/dev/null",
    ]
    return "; ".join(lines)


def _time(value: str | None) -> dt.datetime:
    """An API server timestamp (RFC 3339, to the second or the microsecond) in UTC."""
    if not value:
        return dt.datetime.min.replace(tzinfo=dt.UTC)
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def _pod_subnet(node_ip: str) -> str:
    """The pods of the node at a.b.0.N: 10.244.N.0/24 (hack/kind/node's recall-pod-network)."""
    return f"10.244.{node_ip.rsplit('.', 1)[1]}.0/24"


def cluster_config(mounts: Sequence[Path], workers: int = 0) -> dict[str, object]:
    """kind's Cluster config: a control plane and `workers` workers, each with the mounts
    read-only at the same path; cgroup v1 allowed."""
    nodes: list[dict[str, object]] = []
    for role in ["control-plane", *["worker"] * workers]:
        node: dict[str, object] = {"role": role}
        if mounts:
            node["extraMounts"] = [
                {"hostPath": str(m), "containerPath": str(m), "readOnly": True} for m in mounts
            ]
        nodes.append(node)
    return {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "networking": {"apiServerAddress": "127.0.0.1"},
        "kubeadmConfigPatches": ["kind: KubeletConfiguration\nfailCgroupV1: false\n"],
        "nodes": nodes,
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


def check_guard(cluster: KindCluster, node: str = "") -> None:
    """The node's egress guard holds: RECALL-GUARD ends in REJECT and is jumped to from OUTPUT
    and FORWARD, and no filter rule accepts anything but kube-proxy's DNATed or replied
    traffic. Reads rules only: nothing is sent."""
    for tool in ("iptables", "ip6tables"):
        rules = cluster.exec(tool, "-w", "-S", node=node).stdout.splitlines()
        chain = [r for r in rules if r.startswith("-A RECALL-GUARD ")]
        if not chain or not chain[-1].startswith("-A RECALL-GUARD -j REJECT"):
            raise KindError(f"{tool}: the node's RECALL-GUARD chain does not end in REJECT")
        for hook in ("OUTPUT", "FORWARD"):
            if f"-A {hook} -j RECALL-GUARD" not in rules:
                raise KindError(f"{tool}: {hook} does not jump to RECALL-GUARD")
        accepts = [r for r in rules if r.endswith("-j ACCEPT") and r not in ALLOWED_ACCEPTS]
        if accepts:
            raise KindError(f"{tool}: rules that would accept past the guard: {accepts}")


def corefile_without_forward(corefile: str) -> str:
    """CoreDNS's Corefile without its `forward` block (and the loop check that only guards it)."""
    lines, depth, skipping = [], 0, False
    for line in corefile.splitlines():
        word = line.strip().split(" ", 1)[0]
        if not skipping and word in ("forward", "loop"):
            skipping = line.rstrip().endswith("{")
            continue
        if skipping:
            depth += line.count("{") - line.count("}")
            if depth < 0:
                skipping, depth = False, 0
            continue
        lines.append(line)
    return "\n".join(lines) + "\n"


def _coredns_without_forward(cluster: KindCluster) -> None:
    """Make CoreDNS answer the cluster's names only (see the module contract), restarted."""
    config = json.loads(
        cluster.kubectl("-n", "kube-system", "get", "configmap", "coredns", "-o", "json")
    )
    config["data"]["Corefile"] = corefile_without_forward(config["data"]["Corefile"])
    for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
        config["metadata"].pop(key, None)
    path = cluster.kubeconfig.parent / "coredns.json"
    path.write_text(json.dumps(config))
    cluster.kubectl("apply", "-f", str(path))
    cluster.kubectl("-n", "kube-system", "rollout", "restart", "deployment/coredns")


def _wait_ready(cluster: KindCluster, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            cluster.kubectl("wait", "--for=condition=Ready", "nodes", "--all", "--timeout=10s")
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


def _names(docker: DockerEngine, *args: str) -> list[str]:
    """The names `docker ps ...` (`.Names`) or `docker network ls ...` (`.Name`) lists."""
    field = "{{.Names}}" if args[0] == "ps" else "{{.Name}}"
    return docker.run([*args, "--format", field], capture=True).stdout.split()


def dangling_volumes(docker: DockerEngine) -> set[str]:
    return set(_ids(docker, "volume", "ls", "--filter", "dangling=true"))


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
    found += [f"volume {v}" for v in sorted(dangling_volumes(docker) - volumes_before)]
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
    workers: int = 0,
    archives: Sequence[Path] = (),
    mounts: Sequence[Path] = (),
    timeout: float = 300,
) -> Iterator[KindCluster]:
    """A kind cluster for the duration of the block (see the module contract)."""
    bin_dir = kind_image.kind_tools()
    with docker_engine(progress=False, daemon=KIND_DAEMON) as docker:
        volumes_before = dangling_volumes(docker)
        if leftovers(docker, name, volumes_before):  # a killed run's
            delete(docker, bin_dir, name, modules_made=False, volumes_before=volumes_before)
        modules_made = not HOST_MODULES.exists()
        try:
            yield create(
                docker, name, workdir, bin_dir=bin_dir, workers=workers, archives=archives,
                mounts=mounts, timeout=timeout,
            )  # fmt: skip
        finally:
            delete(docker, bin_dir, name, modules_made=modules_made, volumes_before=volumes_before)


def create(
    docker: DockerEngine,
    name: str,
    workdir: Path,
    *,
    bin_dir: Path,
    workers: int = 0,
    archives: Sequence[Path] = (),
    mounts: Sequence[Path] = (),
    timeout: float = 300,
) -> KindCluster:
    """Make the cluster on `docker` and check it (see the module contract); the caller
    deletes it (`delete`), also when this raises."""
    workdir.mkdir(parents=True, exist_ok=True)
    node_image = os.environ.get("KIND_NODE_IMAGE") or kind_image.build(docker)
    cluster = KindCluster(name, workdir / "kubeconfig", bin_dir, docker, node_image, workers)
    what = f"cluster {name} ({len(cluster.nodes)} nodes, {node_image})"
    with build_step("kind", what, verb="create", past="created") as step:
        network = create_network(docker, name, step)
        config = workdir / "kind.yaml"
        config.write_text(yaml.safe_dump(cluster_config(mounts, workers), sort_keys=False))
        kind = str(bin_dir / "kind")
        env = _kind_env(docker, network)
        create = [
            kind, "create", "cluster", "--name", name, "--image", node_image,
            "--config", str(config), "--kubeconfig", str(cluster.kubeconfig),
            "--wait", f"{int(timeout)}s",
        ]  # fmt: skip
        try:
            step.run(create, env=env)
        except BuildError:
            # kubeadm gives a busy machine's control plane a few deadlines of its own (the
            # admin's ClusterRoleBinding within seconds of the API server starting): once more.
            step.write("[kind] kind create failed; deleting the half-made cluster, once more")
            step.note("made at the second attempt")
            step.run([kind, "delete", "cluster", "--name", name], env=env)
            step.run(create, env=env)
        if workers:  # kind keeps the control plane to itself when it has workers
            cluster.kubectl("taint", "nodes", cluster.control_plane, CONTROL_PLANE_TAINT)
        if not os.environ.get("KIND_NODE_IMAGE"):
            _coredns_without_forward(cluster)
        for archive in archives:
            step.run([kind, "load", "image-archive", str(archive), "--name", name], env=env)
        _wait_ready(cluster, timeout)
        if not os.environ.get("KIND_NODE_IMAGE"):
            for node in cluster.nodes:
                check_guard(cluster, node)
        server = yaml.safe_load(cluster.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        if not str(server).startswith("https://127.0.0.1:"):
            raise KindError(f"the API server is not published on loopback: {server}")
        step.write(json.dumps({"server": server, "network": network}))
        step.note(f"{len(archives)} images loaded, API server {server}")
    return cluster
