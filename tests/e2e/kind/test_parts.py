"""The kind path's pure parts, without Docker: what test_kind.py relies on, checked fast.

- runc_bounds drops exactly the capabilities the host's bounding set lacks, and only those;
- an OCI archive from recall_dev.oci is reproducible and names its image as containerd
  expects;
- kind's cluster config allows cgroup v1 and mounts the media read-only at the same path;
- the guard check refuses a node whose rules would let a packet out.
"""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from recall_dev import kind, oci, runc_bounds


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


def test_cluster_config__one_node_media_read_only_and_cgroup_v1_allowed() -> None:
    config = kind.cluster_config([Path("/tmp/media")])
    nodes = config["nodes"]
    assert isinstance(nodes, list) and len(nodes) == 1
    assert nodes[0]["extraMounts"] == [
        {"hostPath": "/tmp/media", "containerPath": "/tmp/media", "readOnly": True}
    ]
    patches = config["kubeadmConfigPatches"]
    assert isinstance(patches, list)
    assert any("failCgroupV1: false" in patch for patch in patches)
    assert config["networking"] == {"apiServerAddress": "127.0.0.1"}


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

    def exec(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
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
