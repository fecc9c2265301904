"""The local node's pod network, and the guard that proves pod traffic cannot leave the machine.

The rule: tests send traffic only to loopback or to network namespaces they created. A pod's
in-cluster configuration points at the `kubernetes` Service (10.0.0.1:443 here); without
kube-proxy nothing maps that address, and this host's default route would carry it off the
machine. So the pods get their own network, built so that leaving is impossible rather than
merely unlikely:

    pod netns                               host netns
    ┌─────────────────────────┐            ┌────────────────────────────────────────────────┐
    │ eth0 10.244.0.x/24      │── veth ───▶│ bridge recall0 10.244.0.1/24 (no other port)   │
    │ routes: 10.244.0.0/24   │            │ nat PREROUTING  -i recall0 -d 10.0.0.1:443     │
    │         10.0.0.1/32 via │            │      DNAT → 127.0.0.1:<apiserver port>         │
    │         10.244.0.1      │            │ nat OUTPUT      -d 10.0.0.1:443 DNAT → same    │
    │ NO default route        │            │ filter FORWARD  -i/-o recall0 (not both) DROP  │
    └─────────────────────────┘            │ route_localnet=1 on recall0 only               │
                                           └────────────────────────────────────────────────┘

- A pod has exactly two routes: its subnet and the Service IP via the bridge. Any other
  destination fails inside the pod with ENETUNREACH, before a packet exists.
- The bridge has no physical port and no masquerading; the host forwards nothing from or to
  it (FORWARD drops, whatever net.ipv4.ip_forward says). The only way out of the bridge is into
  the host itself, and the one thing there a pod is meant to reach — the Service IP on 443 — is
  rewritten to the loopback API server (route_localnet lets the bridge deliver to 127.0.0.1).
- Host processes that dial the Service IP land on loopback as well (the OUTPUT rule).
- Pods resolve names only through node_dns on the bridge address, which knows the cluster's
  own names (kubernetes.default.svc → the Service IP) and never forwards a query.
- hostNetwork pods would bypass all of this: a ValidatingAdmissionPolicy (node_config.py)
  refuses them.

`verify_isolation()` is the guard. It sends nothing: it reads the CNI configuration, creates a
throwaway network namespace through the same CNI plugin the pods use, asks the kernel's FIB
(`ip route get`, a lookup, not a packet) where an outside address and the Service IP would go
from inside it, reads the host's NAT and filter rules and the bridge's ports, then deletes the
namespace. The node starts no kubelet — so no pod — unless it passes.

Every object made here carries a fixed name (`recall0`, chains `RECALL-NODE-*`) so that
`teardown()` can remove it from the state file alone, even after the creating process died.
Not provided: IPv6 pod addresses (the pods get none), NetworkPolicy enforcement.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import structlog

log = structlog.get_logger("recall_dev.node_net")

BRIDGE = "recall0"
NETWORK_NAME = "recall-node"
POD_SUBNET = ipaddress.ip_network("10.244.0.0/24")
GATEWAY = ipaddress.ip_address("10.244.0.1")
CNI_BIN_DIR = Path("/usr/lib/cni")
NAT_CHAIN = "RECALL-NODE-NAT"
FILTER_CHAIN = "RECALL-NODE-FWD"
# Where the CNI library caches results of ADD (containerd does not let us move it).
CNI_RESULTS_DIR = Path("/var/lib/cni/results")
# Where containerd's CRI plugin bind-mounts pod network namespaces (fixed in containerd 1.6).
NETNS_DIR = Path("/var/run/netns")
# An address no test may reach: the guard checks a pod has no route to it (documentation range).
OUTSIDE_PROBE = "198.51.100.7"


class IsolationError(RuntimeError):
    """The pod network could let a packet leave the machine: no pod may start."""


@dataclass(frozen=True)
class ServiceTarget:
    """The `kubernetes` Service address pods dial, and the loopback API server it maps to."""

    service_ip: str
    service_port: int
    apiserver_port: int


def _run(args: list[str], *, check: bool = True, stdin: str | None = None) -> str:
    done = subprocess.run(args, input=stdin, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, args, done.stdout, done.stderr)
    return done.stdout


def cni_config(ipam_dir: Path, target: ServiceTarget) -> dict[str, object]:
    """The pods' CNI network: a bridge with no gateway role, one route (the Service IP)."""
    return {
        "cniVersion": "1.0.0",
        "name": NETWORK_NAME,
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                # The bridge's address is set by setup(); the plugin must not become a router
                # (isGateway would also switch on ip_forward for the whole host).
                "isGateway": False,
                "isDefaultGateway": False,
                "ipMasq": False,
                "hairpinMode": False,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(ipam_dir),
                    "ranges": [[{"subnet": str(POD_SUBNET), "gateway": str(GATEWAY)}]],
                    "routes": [{"dst": f"{target.service_ip}/32", "gw": str(GATEWAY)}],
                },
            },
            {"type": "loopback"},
        ],
    }


def write_cni_config(conf_dir: Path, ipam_dir: Path, target: ServiceTarget) -> Path:
    conf_dir.mkdir(parents=True, exist_ok=True)
    ipam_dir.mkdir(parents=True, exist_ok=True)
    path = conf_dir / "10-recall-node.conflist"
    path.write_text(json.dumps(cni_config(ipam_dir, target), indent=2))
    return path


# -- set-up and tear-down ----------------------------------------------------------------------


def _nat_rules(target: ServiceTarget) -> list[list[str]]:
    dnat = [
        "-d", f"{target.service_ip}/32", "-p", "tcp", "--dport", str(target.service_port),
        "-j", "DNAT", "--to-destination", f"127.0.0.1:{target.apiserver_port}",
    ]  # fmt: skip
    return [["-i", BRIDGE, *dnat], dnat]


def _filter_rules() -> list[list[str]]:
    return [
        ["-i", BRIDGE, "!", "-o", BRIDGE, "-j", "DROP"],
        ["-o", BRIDGE, "!", "-i", BRIDGE, "-j", "DROP"],
    ]


def setup(target: ServiceTarget) -> None:
    """Create the bridge, the NAT and filter chains and the sysctl; idempotent per target."""
    if not Path(f"/sys/class/net/{BRIDGE}").exists():
        _run(["ip", "link", "add", BRIDGE, "type", "bridge"])
    _run(["ip", "addr", "replace", f"{GATEWAY}/{POD_SUBNET.prefixlen}", "dev", BRIDGE])
    _run(["ip", "link", "set", BRIDGE, "up"])
    Path(f"/proc/sys/net/ipv4/conf/{BRIDGE}/route_localnet").write_text("1\n")
    for table, chain, rules, hooks in (
        ("nat", NAT_CHAIN, _nat_rules(target), ("PREROUTING", "OUTPUT")),
        ("filter", FILTER_CHAIN, _filter_rules(), ("FORWARD",)),
    ):
        _run(["iptables", "-w", "-t", table, "-N", chain], check=False)
        _run(["iptables", "-w", "-t", table, "-F", chain])
        for rule in rules:
            _run(["iptables", "-w", "-t", table, "-A", chain, *rule])
        for hook in hooks:
            jump = ["-j", chain]
            exists = subprocess.run(
                ["iptables", "-w", "-t", table, "-C", hook, *jump], capture_output=True
            )
            if exists.returncode != 0:
                _run(["iptables", "-w", "-t", table, "-I", hook, "1", *jump])


def teardown() -> list[str]:
    """Remove everything setup() and the pods' CNI made; returns what was removed. Idempotent."""
    removed = remove_pod_netns()
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        for port in list(Path(f"/sys/class/net/{BRIDGE}/brif").glob("*")):
            _run(["ip", "link", "del", port.name], check=False)
        _run(["ip", "link", "del", BRIDGE], check=False)
        removed.append(f"bridge {BRIDGE}")
    for table, chain, hooks in (
        ("nat", NAT_CHAIN, ("PREROUTING", "OUTPUT")),
        ("filter", FILTER_CHAIN, ("FORWARD",)),
    ):
        for hook in hooks:
            while (
                subprocess.run(
                    ["iptables", "-w", "-t", table, "-D", hook, "-j", chain], capture_output=True
                ).returncode
                == 0
            ):
                removed.append(f"{table} {hook} → {chain}")
        if (
            subprocess.run(
                ["iptables", "-w", "-t", table, "-F", chain], capture_output=True
            ).returncode
            == 0
        ):
            _run(["iptables", "-w", "-t", table, "-X", chain], check=False)
            removed.append(f"{table} chain {chain}")
    if CNI_RESULTS_DIR.is_dir():
        for cached in CNI_RESULTS_DIR.glob(f"{NETWORK_NAME}-*"):
            cached.unlink(missing_ok=True)
    return removed


def remove_pod_netns() -> list[str]:
    """Delete the network namespaces holding an address of the pod subnet (containerd's)."""
    removed: list[str] = []
    if not NETNS_DIR.is_dir():
        return removed
    for ns in sorted(NETNS_DIR.iterdir()):
        if not ns.name.startswith("cni-") and ns.name != "recall-node-probe":
            continue
        addrs = _run(["ip", "-n", ns.name, "-4", "-o", "addr", "show"], check=False)
        ours = ns.name == "recall-node-probe" or any(
            _in_subnet(word) for line in addrs.splitlines() for word in line.split()
        )
        if not ours:
            continue
        with contextlib.suppress(OSError):
            subprocess.run(["umount", str(ns)], capture_output=True)
            ns.unlink()
        removed.append(f"netns {ns.name}")
    return removed


def _in_subnet(word: str) -> bool:
    try:
        return ipaddress.ip_interface(word).ip in POD_SUBNET
    except ValueError:
        return False


# -- the guard ---------------------------------------------------------------------------------


def verify_isolation(conflist: Path, target: ServiceTarget) -> list[str]:
    """Prove, without sending a packet, that a pod's traffic stays on this machine.

    Returns the facts checked (for the log); raises IsolationError naming the first failure.
    """
    facts: list[str] = []
    facts += _check_config(conflist, target)
    facts += _check_host(target)
    facts += _check_probe_namespace(conflist, target)
    return facts


def _fail(message: str) -> IsolationError:
    return IsolationError(f"pod network isolation: {message}; refusing to start pods")


def _check_config(conflist: Path, target: ServiceTarget) -> list[str]:
    config = json.loads(conflist.read_text())
    plugins = config.get("plugins", [])
    for plugin in plugins:
        if plugin.get("ipMasq") or plugin.get("isDefaultGateway") or plugin.get("isGateway"):
            raise _fail(f"CNI plugin {plugin.get('type')} routes or masquerades for pods")
        routes = plugin.get("ipam", {}).get("routes", [])
        allowed = {f"{target.service_ip}/32"}
        for route in routes:
            if route.get("dst") not in allowed:
                raise _fail(f"CNI route to {route.get('dst')} (only the Service IP is allowed)")
        if plugin.get("type") not in ("bridge", "loopback"):
            raise _fail(f"unexpected CNI plugin {plugin.get('type')}")
    return [f"CNI {conflist.name}: bridge without gateway role or masquerading, one /32 route"]


def _check_host(target: ServiceTarget) -> list[str]:
    nat = _run(["iptables", "-w", "-t", "nat", "-S", NAT_CHAIN], check=False)
    want = f"--to-destination 127.0.0.1:{target.apiserver_port}"
    dnat_lines = [line for line in nat.splitlines() if "DNAT" in line]
    if len(dnat_lines) != 2 or not all(
        f"-d {target.service_ip}/32" in line and f"--dport {target.service_port}" in line
        and want in line
        for line in dnat_lines
    ):  # fmt: skip
        raise _fail(f"the Service IP {target.service_ip} is not mapped to the loopback API server")
    for hook in ("PREROUTING", "OUTPUT"):
        if f"-j {NAT_CHAIN}" not in _run(["iptables", "-w", "-t", "nat", "-S", hook]):
            raise _fail(f"nat {hook} does not jump to {NAT_CHAIN}")
    fwd = _run(["iptables", "-w", "-t", "filter", "-S", FILTER_CHAIN], check=False)
    if fwd.count("-j DROP") != 2:
        raise _fail("the host would forward packets from or to the pod bridge")
    forward = _run(["iptables", "-w", "-t", "filter", "-S", "FORWARD"]).splitlines()
    jumps = [line for line in forward if line.startswith("-A FORWARD")]
    if not jumps or jumps[0] != f"-A FORWARD -j {FILTER_CHAIN}":
        raise _fail(f"{FILTER_CHAIN} is not the first FORWARD rule")
    route_localnet = Path(f"/proc/sys/net/ipv4/conf/{BRIDGE}/route_localnet").read_text().strip()
    if route_localnet != "1":
        raise _fail(f"route_localnet is off on {BRIDGE}: the DNAT to loopback would be dropped")
    for port in Path(f"/sys/class/net/{BRIDGE}/brif").glob("*"):
        if not (Path("/sys/class/net") / port.name / "device").exists():
            continue
        raise _fail(f"the bridge has a physical port {port.name}")
    return [
        f"nat: {target.service_ip}:{target.service_port} → 127.0.0.1:{target.apiserver_port}",
        f"filter: nothing forwarded from or to {BRIDGE}; route_localnet on {BRIDGE} only",
    ]


def _check_probe_namespace(conflist: Path, target: ServiceTarget) -> list[str]:
    """Attach a throwaway namespace through the pods' own CNI plugin and read its routes."""
    config = json.loads(conflist.read_text())
    bridge_conf = dict(config["plugins"][0])
    bridge_conf.update(cniVersion=config["cniVersion"], name=config["name"])
    ns = "recall-node-probe"
    env = dict(
        os.environ,
        CNI_CONTAINERID="recall-node-probe",
        CNI_NETNS=str(NETNS_DIR / ns),
        CNI_IFNAME="eth0",
        CNI_PATH=str(CNI_BIN_DIR),
    )
    _run(["ip", "netns", "add", ns])
    try:
        added = subprocess.run(
            [str(CNI_BIN_DIR / "bridge")],
            input=json.dumps(bridge_conf),
            env={**env, "CNI_COMMAND": "ADD"},
            capture_output=True,
            text=True,
        )
        if added.returncode != 0:
            raise _fail(f"the CNI bridge plugin failed on a probe namespace: {added.stdout}")
        routes = _run(["ip", "-n", ns, "-4", "route", "show"])
        if any(line.startswith("default") for line in routes.splitlines()):
            raise _fail(f"a pod gets a default route:\n{routes}")
        outside = subprocess.run(
            ["ip", "-n", ns, "route", "get", OUTSIDE_PROBE], capture_output=True, text=True
        )
        if outside.returncode == 0:
            raise _fail(f"a pod has a route to {OUTSIDE_PROBE}: {outside.stdout.strip()}")
        service = _run(["ip", "-n", ns, "route", "get", target.service_ip])
        if f"via {GATEWAY}" not in service:
            raise _fail(f"the Service IP is not routed to the bridge: {service.strip()}")
    finally:
        subprocess.run(
            [str(CNI_BIN_DIR / "bridge")],
            input=json.dumps(bridge_conf),
            env={**env, "CNI_COMMAND": "DEL"},
            capture_output=True,
            text=True,
        )
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    return [
        f"probe pod netns: no default route, no route to {OUTSIDE_PROBE}, "
        f"{target.service_ip} via {GATEWAY}"
    ]
