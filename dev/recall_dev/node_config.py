"""What the local node's processes are given: where its files live, the containerd and kubelet
configurations, the command lines of its processes, and the cluster objects it applies.

- containerd runs as a second containerd: its own root, state, socket and config; CRI on,
  cgroupfs, `restrict_oom_score_adj` (this host's root lacks CAP_SYS_RESOURCE, so runc cannot
  lower an OOM score), the pause image built here as sandbox image, CNI from /usr/lib/cni with
  the config node_net writes.
- kube-controller-manager runs the controllers pods need beyond the control plane's own
  (Deployments and ReplicaSets, PodDisruptionBudgets, the `kube-root-ca.crt` publisher,
  ClusterRole aggregation, node lifecycle: it lifts the not-ready taint).
- The kubelet registers as node `127.0.0.1` (`--hostname-override`: the API server reaches its
  logs and exec endpoints on loopback), cgroup v1 allowed (`failCgroupV1: false`), every path
  under the node's work directory, pod cgroups under `/recall-node`, no image garbage
  collection (images cannot be pulled back), pods with no nameserver. It authenticates as the
  ServiceAccount kube-system/recall-node, bound to `system:node`.
- A ValidatingAdmissionPolicy refuses hostNetwork pods, which would bypass the pod network.

Pure: every function returns a file's text, a list of objects or an argument list; it writes
nothing, starts nothing and picks no port (the caller passes them in). recall_dev.node writes
the files and runs the processes; recall_dev.node_teardown finds what they left through the
same `Layout`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from recall_dev import node_net
from recall_dev.node_images import PAUSE_IMAGE
from recall_dev.pki import kubeconfig_dict

NODE_NAME = "127.0.0.1"
CLUSTER_DOMAIN = "cluster.local"
CGROUP_ROOT = "recall-node"
CGROUP_FS = Path("/sys/fs/cgroup")
NODE_IDENTITY = "recall-node"  # ServiceAccount in kube-system, bound to system:node
NO_HOST_NETWORK_POLICY = "recall-dev-no-host-network"
NODE_CONTROLLERS = (
    "deployment-controller",
    "replicaset-controller",
    "disruption-controller",
    "root-ca-certificate-publisher-controller",
    "clusterrole-aggregation-controller",
    "node-lifecycle-controller",
    "pod-garbage-collector-controller",
)
# For dnsPolicy Default: no nameserver at all. ClusterFirst pods ask node_dns, which knows the
# cluster's names only and never forwards.
RESOLV_CONF = "# recall dev node: no upstream nameserver\noptions ndots:1\n"


@dataclass(frozen=True)
class Layout:
    """Where a node keeps what it writes: everything under its work directory."""

    workdir: Path

    @property
    def containerd_dir(self) -> Path:
        return self.workdir / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.containerd_dir / "containerd.sock"

    @property
    def containerd_config(self) -> Path:
        return self.containerd_dir / "config.toml"

    @property
    def cri_sandboxes(self) -> Path:
        """One directory per pod sandbox containerd's CRI plugin knows, named by its id."""
        return self.containerd_dir / "root" / "io.containerd.grpc.v1.cri" / "sandboxes"

    @property
    def logs_dir(self) -> Path:
        return self.workdir / "logs"

    @property
    def cni_conf_dir(self) -> Path:
        return self.workdir / "cni" / "net.d"

    @property
    def cni_ipam_dir(self) -> Path:
        return self.workdir / "cni" / "ipam"

    @property
    def kubelet_dir(self) -> Path:
        return self.workdir / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.kubelet_dir / "config.yaml"

    @property
    def kubelet_kubeconfig(self) -> Path:
        return self.kubelet_dir / "kubeconfig"

    @property
    def resolv_conf(self) -> Path:
        return self.kubelet_dir / "resolv.conf"


# -- containerd --------------------------------------------------------------------------------


def containerd_config(layout: Layout) -> str:
    """containerd's config.toml."""
    root = layout.containerd_dir
    return f"""version = 2
root = "{root / "root"}"
state = "{root / "state"}"
disabled_plugins = [
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing",
]

[grpc]
  address = "{layout.containerd_socket}"

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
    conf_dir = "{layout.cni_conf_dir}"
    max_conf_num = 1
"""


# -- kubelet -----------------------------------------------------------------------------------


def kubelet_config(layout: Layout, port: int, healthz_port: int) -> str:
    """The kubelet's config.yaml: loopback only, node_dns (on the bridge) as cluster DNS."""
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": "127.0.0.1",
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "authentication": {
            "anonymous": {"enabled": True},
            "webhook": {"enabled": False},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{CGROUP_ROOT}",
        "cgroupsPerQOS": True,
        "failCgroupV1": False,
        "failSwapOn": False,
        "oomScoreAdj": 0,
        "podLogsDir": str(layout.workdir / "pod-logs"),
        "resolvConf": str(layout.resolv_conf),
        "clusterDNS": [str(node_net.GATEWAY)],
        "clusterDomain": CLUSTER_DOMAIN,
        "volumePluginDir": str(layout.workdir / "volume-plugins"),
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
    return yaml.safe_dump(config, sort_keys=False)


def kubelet_kubeconfig(server: str, ca: Path, token: str) -> str:
    """The kubelet's kubeconfig: the node's ServiceAccount token (NODE_IDENTITY)."""
    config = kubeconfig_dict(server, ca, token=token, user=NODE_IDENTITY, context="recall-node")
    return yaml.safe_dump(config, sort_keys=False)


def kubelet_args(bin_dir: Path, layout: Layout) -> list[str]:
    kubelet_dir = layout.kubelet_dir
    return [
        str(bin_dir / "kubelet"),
        f"--config={layout.kubelet_config}",
        f"--kubeconfig={layout.kubelet_kubeconfig}",
        f"--root-dir={kubelet_dir / 'root'}",
        f"--cert-dir={kubelet_dir / 'pki'}",
        f"--hostname-override={NODE_NAME}",
        "--v=1",
    ]


# -- the other processes -----------------------------------------------------------------------


def controller_manager_args(
    bin_dir: Path, kubeconfig: Path, ca_cert: Path, layout: Layout, port: int
) -> list[str]:
    """kube-controller-manager running NODE_CONTROLLERS only, without leader election."""
    kc = str(kubeconfig)
    return [
        str(bin_dir / "kube-controller-manager"),
        f"--kubeconfig={kc}",
        f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}",
        f"--controllers={','.join(NODE_CONTROLLERS)}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={layout.workdir / 'kcm-certs'}",
        f"--root-ca-file={ca_cert}",
        "--use-service-account-credentials=false",
        "--node-monitor-period=2s",
        "--v=1",
    ]


def scheduler_args(bin_dir: Path, kubeconfig: Path, port: int) -> list[str]:
    kc = str(kubeconfig)
    return [
        str(bin_dir / "kube-scheduler"),
        f"--kubeconfig={kc}",
        f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        "--v=1",
    ]


def dns_args(service_ip: str, kubeconfig: Path) -> list[str]:
    """recall_dev.node_dns on the bridge, answering kubernetes.default.svc with `service_ip`
    and other Services' names with their ready pods (read through `kubeconfig`)."""
    record = f"kubernetes.default.svc.{CLUSTER_DOMAIN}={service_ip}"
    return [
        sys.executable, "-m", "recall_dev.node_dns", f"--listen={node_net.GATEWAY}",
        f"--domain={CLUSTER_DOMAIN}", f"--record={record}", f"--kubeconfig={kubeconfig}",
    ]  # fmt: skip


# -- cluster objects ---------------------------------------------------------------------------


def cluster_objects() -> list[dict[str, object]]:
    """The node's identity and RBAC, and the policy refusing hostNetwork pods."""
    return [*_identity_objects(), *_no_host_network_objects()]


def _identity_objects() -> list[dict[str, object]]:
    """ServiceAccount kube-system/NODE_IDENTITY, bound to the `system:node` ClusterRole."""
    return [
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
    ]


def _no_host_network_objects() -> list[dict[str, object]]:
    """A ValidatingAdmissionPolicy and its binding that deny hostNetwork pods, which would
    bypass the pod network (recall_dev.node_net)."""
    return [
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
                        "expression": "!has(object.spec.hostNetwork) || !object.spec.hostNetwork",
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
