"""The kind path's pure parts, without Docker: what test_kind.py relies on, checked fast.

- runc_bounds drops exactly the capabilities the host's bounding set lacks, and only those;
- an OCI archive from recall_dev.oci is reproducible and names its image as containerd
  expects;
- kind's cluster config has the workers asked for, allows cgroup v1 and mounts the media
  read-only at the same path in every node;
- the node image's pod network gives the node at a.b.0.N the pods 10.244.N.0/24 and routes
  the other nodes' pods through their addresses;
- the guard check refuses a node whose rules would let a packet out;
- what a drill may leave (a node down, a stray container, network or volume, a cut not
  healed, a node cordoned) is found by `KindCluster.drill_leftovers`;
- a cut is one `docker exec` (the chain filled, then the three jumps; a rule that fails stops
  it before any jump), and so is its heal (every jump, then the chain);
- the cut drill's store watch, run as an operator pod runs it (against a file:// store), lists
  from its start until told to stop, and says why when it ends early;
- a failed pod test's report and every pod's whole log are kept at once, in a folder of its own.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from recall.base.settings import StoreSettings
from recall.bucket import Stores
from recall.transcripts import namespace_prefix
from recall_dev import kind, oci, runc_bounds
from tests.e2e.pods import conftest as pods_conftest
from tests.e2e.pods.conftest import PodCluster
from tests.e2e.pods.test_drills import NS, ScratchWatch


def status_without(*missing: str) -> str:
    bounding = 0
    for bit, name in enumerate(runc_bounds.CAPABILITIES):
        if f"CAP_{name}" not in missing:
            bounding |= 1 << bit
    return f"Name:\tx\nCapBnd:\t{bounding:016x}\n"


def test_runc_bounds__drops_only_what_the_bounding_set_lacks() -> None:
    missing = runc_bounds.missing_capabilities(status_without("CAP_SYS_RESOURCE"))
    assert missing == {"CAP_SYS_RESOURCE"}
    caps = {
        "bounding": ["CAP_SYS_ADMIN", "CAP_SYS_RESOURCE", "CAP_NET_ADMIN"],
        "effective": ["CAP_SYS_RESOURCE"],
        "ambient": [],
    }
    assert runc_bounds.bounded(caps, missing) == {
        "bounding": ["CAP_SYS_ADMIN", "CAP_NET_ADMIN"],
        "effective": [],
        "ambient": [],
    }


def test_runc_bounds__a_full_bounding_set_drops_nothing() -> None:
    assert runc_bounds.missing_capabilities(status_without()) == set()


def test_oci_archive__is_reproducible_and_names_its_image(tmp_path: Path) -> None:
    binary = tmp_path / "tool"
    binary.write_bytes(b"\x7fELF not really")

    def archive(name: str) -> Path:
        out = tmp_path / name
        out.mkdir()
        files = [oci.File("usr/local/bin/tool", source=binary, mode=0o755), *oci.scratch_files()]
        layer = oci.files_layer(files, out / "layer.tar.gz")
        return oci.write_archive(out / "image.tar", "registry.k8s.io/tool:v1", [layer])

    first, second = archive("a"), archive("b")
    assert first.read_bytes() == second.read_bytes()
    with tarfile.open(first) as tar:
        index = json.loads(tar.extractfile("index.json").read())  # type: ignore[union-attr]
        names = tar.getnames()
    (manifest,) = index["manifests"]
    assert manifest["annotations"]["io.containerd.image.name"] == "registry.k8s.io/tool:v1"
    assert f"blobs/sha256/{manifest['digest'].removeprefix('sha256:')}" in names
    assert "oci-layout" in names


def test_cluster_config__a_control_plane_and_workers_media_read_only_cgroup_v1_allowed() -> None:
    config = kind.cluster_config([Path("/tmp/media")], workers=2)
    nodes = config["nodes"]
    assert isinstance(nodes, list)
    assert [n["role"] for n in nodes] == ["control-plane", "worker", "worker"]
    for node in nodes:
        assert node["extraMounts"] == [
            {"hostPath": "/tmp/media", "containerPath": "/tmp/media", "readOnly": True}
        ]
    patches = config["kubeadmConfigPatches"]
    assert isinstance(patches, list)
    assert any("failCgroupV1: false" in patch for patch in patches)
    assert config["networking"] == {"apiServerAddress": "127.0.0.1"}


def test_node_names__as_kind_names_its_containers() -> None:
    assert kind.node_names("c", 0) == ["c-control-plane"]
    assert kind.node_names("c", 3) == ["c-control-plane", "c-worker", "c-worker2", "c-worker3"]


POD_NETWORK = (
    Path(__file__).resolve().parents[3] / "hack/kind/node/rootfs/kind/bin/recall-pod-network"
)


def test_pod_network__the_node_at_n_gets_pods_n_and_routes_to_every_other_node(
    tmp_path: Path,
) -> None:
    """hack/kind/node's recall-pod-network, run with a fake `ip` in a directory of its own: the
    CNI configuration for 10.244.3.0/24 (no default route, no masquerading), the bridge with the
    pods' gateway, and one route per other possible node, through that node's address, from
    the gateway."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "ip-calls"
    (bin_dir / "ip").write_text(
        "#!/bin/bash\n"
        f'echo "$*" >> {calls}\n'
        'case "$*" in\n'
        '  "-4 route show default") echo "default via 172.18.0.1 dev eth0" ;;\n'
        '  "-4 -o addr show dev eth0 scope global") '
        'echo "7: eth0    inet 172.18.0.3/16 brd 172.18.255.255 scope global eth0" ;;\n'
        '  "-batch -") cat >> ' + str(calls) + " ;;\n"
        "esac\n"
    )
    (bin_dir / "ip").chmod(0o755)
    script = POD_NETWORK.read_text().replace("/etc/cni/net.d/", f"{tmp_path}/net.d/")
    (tmp_path / "pod-network").write_text(script)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    subprocess.run(["bash", str(tmp_path / "pod-network")], check=True, env=env)
    conf = json.loads((tmp_path / "net.d/10-recall.conflist").read_text())
    (plugin,) = conf["plugins"]
    assert plugin["ipMasq"] is False and plugin["isDefaultGateway"] is False
    assert plugin["ipam"]["ranges"] == [[{"subnet": "10.244.3.0/24", "gateway": "10.244.3.1"}]]
    assert {r["dst"] for r in plugin["ipam"]["routes"]} == {"10.244.0.0/16", "10.96.0.0/12"}
    routes = [line for line in calls.read_text().splitlines() if line.startswith("route ")]
    assert "route replace 10.244.2.0/24 via 172.18.0.2 dev eth0 src 10.244.3.1" in routes
    assert "route replace 10.244.254.0/24 via 172.18.0.254 dev eth0 src 10.244.3.1" in routes
    assert not [r for r in routes if r.startswith("route replace 10.244.3.0/24")]
    assert len(routes) == 252
    # The bridge exists with the gateway before the routes name it as their source.
    lines = calls.read_text().splitlines()
    assert "addr replace 10.244.3.1/24 dev kindbr0" in lines
    assert lines.index("addr replace 10.244.3.1/24 dev kindbr0") < lines.index(routes[0])


GUARDED = [
    "-P OUTPUT ACCEPT",
    "-N RECALL-GUARD",
    "-A OUTPUT -j KUBE-FIREWALL",
    "-A OUTPUT -j RECALL-GUARD",
    "-A FORWARD -j RECALL-GUARD",
    *kind.ALLOWED_ACCEPTS,
    "-A RECALL-GUARD -o lo -j RETURN",
    "-A RECALL-GUARD -j REJECT --reject-with icmp-port-unreachable",
]


class FakeNode:
    """A KindCluster whose node answers `iptables -S` with given rules."""

    def __init__(self, rules: list[str]) -> None:
        self.rules = rules

    def exec(
        self, *args: str, node: str = "", check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(list(args), 0, "\n".join(self.rules) + "\n", "")


def check(rules: list[str]) -> None:
    node: Any = FakeNode(rules)
    kind.check_guard(node)


def test_check_guard__passes_a_guarded_node() -> None:
    check(GUARDED)


@pytest.mark.parametrize(
    "rules",
    [
        [r for r in GUARDED if r != "-A FORWARD -j RECALL-GUARD"],
        [r for r in GUARDED if not r.startswith("-A RECALL-GUARD -j REJECT")],
        [*GUARDED, "-A FORWARD -o eth0 -j ACCEPT"],
    ],
    ids=["forward-unguarded", "no-final-reject", "an-accept-past-the-guard"],
)
def test_check_guard__refuses_a_way_out(rules: list[str]) -> None:
    with pytest.raises(kind.KindError):
        check(rules)


COREFILE = """.:53 {
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
    }
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    cache 30
    loop
    reload
}
"""


def test_corefile_without_forward__answers_the_cluster_forwards_nothing() -> None:
    out = kind.corefile_without_forward(COREFILE)
    assert "forward" not in out and "max_concurrent" not in out and "loop" not in out
    assert "kubernetes cluster.local" in out and "pods insecure" in out and "cache 30" in out
    assert out.count("{") == out.count("}") == 2


class FakeDocker:
    """Answers the listings `KindCluster.drill_leftovers` asks the daemon for."""

    def __init__(
        self,
        containers: list[str],
        running: list[str],
        networks: list[str],
        volumes: list[str],
        rules: dict[str, list[str]],
    ) -> None:
        self.containers, self.running, self.networks = containers, running, networks
        self.volumes, self.rules = volumes, rules

    def run(self, args: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        if args[:2] == ["ps", "-a"]:
            out = self.containers
        elif args[0] == "ps":
            out = self.running
        elif args[:2] == ["network", "ls"]:
            out = self.networks
        elif args[:2] == ["volume", "ls"]:
            out = self.volumes
        else:
            assert args[0] == "exec" and args[2:] == ["iptables", "-w", "-S"], args
            out = self.rules[args[1]]
        return subprocess.CompletedProcess(args, 0, "\n".join(out) + "\n", "")


class FakeCluster(kind.KindCluster):
    cordoned: tuple[str, ...] = ()

    def kubectl(self, *args: str) -> str:
        assert args == ("get", "nodes", "-o", "json")
        items = [
            {"metadata": {"name": n}, "spec": {"unschedulable": True} if n in self.cordoned else {}}
            for n in self.nodes
        ]
        return json.dumps({"items": items})


def drilled(docker: FakeDocker, cordoned: tuple[str, ...] = ()) -> FakeCluster:
    fake: Any = docker
    cluster = FakeCluster("c", Path("kubeconfig"), Path("bin"), fake, "image", workers_count=2)
    cluster.cordoned = cordoned
    return cluster


NODES = kind.node_names("c", 2)


def test_drill_leftovers__none_when_every_drill_was_undone() -> None:
    docker = FakeDocker(NODES, NODES, ["recall-kind-c"], ["v1"], dict.fromkeys(NODES, GUARDED))
    assert drilled(docker).drill_leftovers({"v1"}) == []


def test_drill_leftovers__a_node_down_a_stray_container_network_or_volume_a_cut_a_cordon() -> None:
    cut = [*GUARDED, "-N RECALL-DRILL", "-A INPUT -j RECALL-DRILL"]
    docker = FakeDocker(
        [*NODES, "c-extra"],
        [NODES[0], NODES[1]],
        ["recall-kind-c", "recall-kind-c-2"],
        ["v1", "v2"],
        {NODES[0]: GUARDED, NODES[1]: cut},
    )
    assert drilled(docker, cordoned=(NODES[1],)).drill_leftovers({"v1"}) == [
        "node c-worker2 not running",
        "container c-extra",
        "network recall-kind-c-2",
        "volume v2",
        "node c-worker: iptables chain RECALL-DRILL",
        "node c-worker cordoned",
    ]


class ExecDocker:
    """Answers `docker inspect` with each node's address on the cluster's network, and records
    every `docker exec` (the node, then the command)."""

    def __init__(self, addresses: dict[str, str]) -> None:
        self.addresses = addresses
        self.execs: list[list[str]] = []

    def run(self, args: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        if args[0] == "inspect":
            networks = {kind.network_name("c"): {"IPAddress": self.addresses[args[-1]]}}
            return subprocess.CompletedProcess(args, 0, json.dumps(networks), "")
        assert args[0] == "exec", args
        self.execs.append(args[1:])
        return subprocess.CompletedProcess(args, 0, "", "")


def run_in_node(script: str, tmp_path: Path, fail_at: str = "") -> list[str]:
    """Run a node's shell `script` with a fake `iptables` that logs its arguments (and fails on
    the call whose arguments contain `fail_at`, and on a `-D` once that hook has none left,
    one jump each); the calls, in order."""
    calls = tmp_path / "iptables-calls"
    jumps = tmp_path / "jumps"
    jumps.mkdir(exist_ok=True)
    fake = tmp_path / "iptables"
    fake.write_text(
        "#!/bin/bash\n"
        f'echo "$*" >> {calls}\n'
        f'if [ -n "{fail_at}" ] && [[ "$*" == *"{fail_at}"* ]]; then exit 1; fi\n'
        'if [ "$2" = -D ]; then\n'
        f'  [ -e {jumps}/"$3" ] && exit 1\n'
        f'  touch {jumps}/"$3"\n'
        "fi\n"
    )
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    subprocess.run(["sh", "-c", script], env=env, check=False)
    return calls.read_text().splitlines() if calls.exists() else []


def test_cut__one_exec_fills_the_chain_then_jumps_to_it_from_input_output_forward(
    tmp_path: Path,
) -> None:
    """The cut is one `docker exec` on the node (a busy machine delays it once, not once per
    rule, while the jobs a drill chose run on): the chain of DROPs to and from the other nodes
    and their pods, then the three jumps, last; rules made ahead are used as they are."""
    nodes = kind.node_names("c", 2)
    docker = ExecDocker(dict(zip(nodes, ["172.18.0.2", "172.18.0.3", "172.18.0.4"], strict=True)))
    fake: Any = docker
    cluster = kind.KindCluster("c", Path("kubeconfig"), Path("bin"), fake, "image", 2)
    rules = cluster.cut_rules("c-worker")
    cluster.cut("c-worker", rules)
    ((node, *command),) = docker.execs
    assert node == "c-worker" and command[:2] == ["sh", "-c"]
    calls = run_in_node(command[2], tmp_path)
    drops = {
        f"-w -A RECALL-DRILL -{way} {peer} -j DROP"
        for peer in ("172.18.0.2", "172.18.0.4", "10.244.2.0/24", "10.244.4.0/24")
        for way in "ds"
    }
    assert calls[0] == "-w -N RECALL-DRILL"
    assert set(calls[1:-3]) == drops and len(calls) == 1 + len(drops) + 3
    assert calls[-3:] == [f"-w -I {hook} 1 -j RECALL-DRILL" for hook in kind.DRILL_HOOKS]
    cluster.cut("c-worker")  # without rules made ahead: made now, the same
    assert docker.execs[-1] == docker.execs[0]


def test_cut__a_rule_that_fails_stops_the_script_before_any_jump(tmp_path: Path) -> None:
    nodes = kind.node_names("c", 2)
    docker = ExecDocker(dict(zip(nodes, ["172.18.0.2", "172.18.0.3", "172.18.0.4"], strict=True)))
    fake: Any = docker
    cluster = kind.KindCluster("c", Path("kubeconfig"), Path("bin"), fake, "image", 2)
    cluster.cut("c-worker")
    calls = run_in_node(docker.execs[0][3], tmp_path, fail_at="-s 10.244.2.0/24")
    assert calls[-1] == "-w -A RECALL-DRILL -s 10.244.2.0/24 -j DROP"
    assert not [c for c in calls if " -I " in c]


def test_heal__one_exec_deletes_every_jump_then_the_chain(tmp_path: Path) -> None:
    docker = ExecDocker({})
    fake: Any = docker
    cluster = kind.KindCluster("c", Path("kubeconfig"), Path("bin"), fake, "image", 2)
    cluster.heal("c-worker2")
    ((node, *command),) = docker.execs
    assert node == "c-worker2" and command[:2] == ["sh", "-c"]
    calls = run_in_node(command[2], tmp_path)
    deletes = [f"-w -D {hook} -j RECALL-DRILL" for hook in kind.DRILL_HOOKS for _ in range(2)]
    assert calls == [*deletes, "-w -F RECALL-DRILL", "-w -X RECALL-DRILL"]


def stand_in_kubectl(tmp_path: Path) -> PodCluster:
    """A PodCluster whose kubectl runs `kubectl exec ... -- python3 ARGS` here, with this
    interpreter: an operator pod's scripts against the store RECALL_STORE_URL names."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl").write_text(
        '#!/bin/bash\nwhile [ "$1" != "--" ]; do shift; done\nshift 2\n'
        f'exec {sys.executable} "$@"\n'
    )
    (bin_dir / "kubectl").chmod(0o755)
    fake: Any = None
    cluster = kind.KindCluster("c", tmp_path / "kubeconfig", bin_dir, fake, "image", 2)
    return PodCluster(cluster, tmp_path)


def test_scratch_watch__one_process_lists_from_its_start_until_told_to_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cut drill's store watch (WATCH_UNTIL_STOPPED) run as the operator pod would run
    it, against a file:// store: it says when it first listed, and on `stop` lists once more
    and hands over every object of the namespace it saw; its stop file and output go."""
    monkeypatch.setenv("RECALL_STORE_URL", f"file://{tmp_path}/store")
    store = Stores(StoreSettings()).results()
    first, second = (f"{namespace_prefix(NS)}j0-uid/a1-{'1' * 32}/c00000{k}.json" for k in (0, 1))
    store.put(first, b"{}")
    store.put("scratch/another-namespace/j0/c000000.json", b"{}")
    watch = ScratchWatch(stand_in_kubectl(tmp_path), "operator-0")
    try:
        watch.started()
        store.put(second, b"{}")
        objects = watch.stop()
    finally:
        watch.close()
    assert set(objects) == {first, second}
    assert all(dt.datetime.fromisoformat(v) for v in objects.values())
    assert watch.listings >= 2 and watch.errors == 0
    assert not Path(watch.stop_file).exists()


def test_scratch_watch__a_process_that_ends_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RECALL_STORE_URL", raising=False)
    watch = ScratchWatch(stand_in_kubectl(tmp_path), "operator-0")
    try:
        with pytest.raises(AssertionError, match=r"(?s)ended: .*StoreUrlInvalid"):
            watch.started()
    finally:
        watch.close()


class EvidenceCluster(PodCluster):
    """Answers the kubectl calls of `diagnostics` and `keep_evidence` with made-up output."""

    def run(
        self, tool: str, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        if args[:2] == ("get", "pods") and "name" in args:
            out = "pod/worker-a\npod/operator-b\n"
        elif args[0] == "logs" and "--previous" in args:
            out = "" if args[3] == "operator-b" else f"{args[3]} before its restart\n"
        elif args[0] == "logs":
            out = f"{args[3] if args[1] == '-n' else 'tail'} whole log\n"
        else:
            out = f"{' '.join(args)}: listed\n"
        return subprocess.CompletedProcess([tool, *args], 0, out, "")


def test_keep_failure__a_failed_tests_report_and_every_pods_log_kept_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pods_conftest, "EVIDENCE", tmp_path / "run")
    fake: Any = None
    cluster = EvidenceCluster(fake, tmp_path)
    item: Any = SimpleNamespace(
        name="test_drill_3__cut[a/b]",
        nodeid="tests/e2e/pods/test_drills.py::test_drill_3__cut[a/b]",
        module=SimpleNamespace(NS="recall-drill"),
    )
    report: Any = SimpleNamespace(
        when="call",
        longreprtext="AssertionError: cut-j3: a cut worker's result",
        sections=[("Captured stdout call", "drill figures: {}")],
    )
    folder = pods_conftest.keep_failure(cluster, item, report)
    assert folder == tmp_path / "run" / "test_drill_3__cut-a-b-"
    failure = (folder / "failure.txt").read_text()
    assert "a cut worker's result" in failure and "drill figures: {}" in failure
    assert (
        "get pods,batches,transcriptionjobs -n recall-drill"
        in (folder / "diagnostics.txt").read_text()
    )
    assert (folder / "worker-a.log").read_text() == "worker-a whole log\n"
    assert (folder / "worker-a.previous.log").read_text() == "worker-a before its restart\n"
    assert (folder / "operator-b.log").exists() and not (
        folder / "operator-b.previous.log"
    ).exists()
    report.when = "teardown"
    assert (
        pods_conftest.keep_failure(cluster, item, report).name == "test_drill_3__cut-a-b--teardown"
    )
