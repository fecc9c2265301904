"""The kind node image, assembled offline from what this project builds (`make kind-image`).

    python -m recall_dev.kind_image build [--force]

`kind build node-image` fetches every image its inputs lack; here nothing is fetched. The
image `recall.local/kind-node:v<kube>` (NODE_TAG) is built on the kind daemon
(recall_dev.docker.KIND_DAEMON, or the default daemon where one answers) from:
1. **Binaries**, `hack/k8s-tools/build.sh --with-kind`: kubeadm, kubelet, kubectl (v<kube>,
   carrying their version), kube-apiserver, kube-controller-manager, kube-scheduler,
   kube-proxy, CoreDNS and etcd at the versions kubeadm names, the pause binary.
2. **The images kubeadm needs**, named exactly as `kubeadm config images list` names them,
   written as OCI archives by recall_dev.oci: the control plane's and etcd's static binaries
   FROM scratch (plus /etc/passwd, /etc/group, /tmp), CoreDNS as /coredns, kube-proxy on a
   debootstrapped bookworm with iptables and conntrack (it runs them), the pause image (the
   static binary of hack/kind/pause alone, user 65535). Cached by their inputs' digests under
   ~/.cache/recall/kind-image.
3. **The base**: Debian bookworm by debootstrap with systemd, containerd and runc (Debian's
   1.6 and 1.1: kubelet 1.37 still takes its cgroup driver from its own config for a
   containerd without RuntimeConfig), the CNI plugins, iptables, conntrack, iproute2, procps,
   CA certificates, pigz; `docker import`ed as recall.local/kind-base:bookworm-<digest>.
4. **hack/kind/node/**: its Dockerfile and rootfs/ (entrypoint, systemd units, the egress
   guard, the node's share of the pod network, containerd's config with the sandbox image
   kubeadm names, /kind/manifests/default-cni.yaml), staged with the above in build/kind-node/
   and built with
   `docker build --network=none`. The images are imported into containerd's store at build
   time (the Dockerfile says how), so a node starts with them.

The image carries a label with the digest of everything staged (and the base's ID): when an
image with that tag and label exists, nothing is built. Older node images are pruned.
The build says one line (recall_dev.buildlog); the whole output is in its log.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from recall_dev import oci
from recall_dev.buildlog import Step, build_step
from recall_dev.cluster import repo_root
from recall_dev.docker import KIND_DAEMON, DockerEngine, cache_root, docker_engine
from recall_dev.image import debootstrap_tarball

NODE_REPOSITORY = "recall.local/kind-node"
BASE_REPOSITORY = "recall.local/kind-base"
INPUTS_LABEL = "dev.recall.kind-node.inputs"
NODE_FILES = Path("hack/kind/node")
STAGE_DIR = Path("build/kind-node")
NODE_PACKAGES = (
    "systemd", "systemd-sysv", "containerd", "runc", "containernetworking-plugins",
    "iptables", "conntrack", "iproute2", "procps", "ca-certificates", "pigz",
)  # fmt: skip
PROXY_PACKAGES = ("iptables", "conntrack")
# The default StorageClass's two images (/kind/manifests/default-storage.yaml): not kubeadm's,
# named here. The helper runs `mkdir`/`rm` in a claim's directory: kube-proxy's Debian base.
LOCAL_PATH_IMAGE = "recall.local/local-path-provisioner:v{version}"
LOCAL_PATH_HELPER_IMAGE = "recall.local/kind-helper:bookworm"
# Bump when the archives' layout changes, so cached ones are made again.
ARCHIVE_FORMAT = "1"


class KindImageError(RuntimeError):
    """The node image could not be assembled."""


def versions() -> dict[str, str]:
    """hack/k8s-tools/versions.env as a dict."""
    found = {}
    for line in (repo_root() / "hack/k8s-tools/versions.env").read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            found[key.strip()] = value.strip()
    return found


def node_tag() -> str:
    return f"{NODE_REPOSITORY}:v{versions()['KUBE_VERSION']}"


def kind_tools() -> Path:
    """The bin directory with kind and the node's binaries (build.sh --with-kind)."""
    override = os.environ.get("RECALL_K8S_BIN")
    if override:
        return Path(override)
    script = repo_root() / "hack/k8s-tools/build.sh"
    out = subprocess.run([str(script), "--with-kind"], check=True, stdout=subprocess.PIPE)
    return Path(out.stdout.decode().strip().splitlines()[-1])


def _digest(*parts: str | Path) -> str:
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, Path):
            with part.open("rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
        else:
            h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


# -- the images kubeadm needs ------------------------------------------------------------------


def kubeadm_images(bin_dir: Path, kube_version: str) -> dict[str, str]:
    """Component name (kube-apiserver, etcd, coredns, pause, ...) → the image kubeadm names."""
    out = subprocess.run(
        [str(bin_dir / "kubeadm"), "config", "images", "list",
         f"--kubernetes-version=v{kube_version}"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    refs = [line.strip() for line in out.splitlines() if line.strip()]
    return {ref.rsplit("/", 1)[1].split(":", 1)[0]: ref for ref in refs}


@dataclass(frozen=True)
class ImageSpec:
    """One image kubeadm needs: what it is made of (binary, base rootfs) and how it starts."""

    ref: str
    binary: Path | None  # None: the base alone
    path: str
    base: Path | None = None
    entrypoint: tuple[str, ...] = ()
    user: str = ""


def image_specs(bin_dir: Path, refs: dict[str, str], proxy_base: Path) -> list[ImageSpec]:
    """What each of kubeadm's images holds; checks kubeadm names the versions built here."""
    v = versions()
    expected = {
        "etcd": f"{v['KIND_ETCD_VERSION']}-0",
        "coredns": f"v{v['KIND_COREDNS_VERSION']}",
    }
    for name, tag in expected.items():
        if not refs[name].endswith(f":{tag}"):
            raise KindImageError(
                f"kubeadm names {refs[name]}, hack/k8s-tools/versions.env builds {name} {tag}"
            )
    specs = [
        ImageSpec(refs[name], bin_dir / name, f"usr/local/bin/{name}")
        for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
    ]
    proxy = ImageSpec(refs["kube-proxy"], bin_dir / "kube-proxy", "usr/local/bin/kube-proxy")
    etcd = bin_dir / f"etcd-v{v['KIND_ETCD_VERSION']}"
    coredns = bin_dir / f"coredns-v{v['KIND_COREDNS_VERSION']}"
    specs += [
        ImageSpec(proxy.ref, proxy.binary, proxy.path, base=proxy_base),
        ImageSpec(refs["etcd"], etcd, "usr/local/bin/etcd"),
        ImageSpec(refs["coredns"], coredns, "coredns", entrypoint=("/coredns",)),
        ImageSpec(
            refs["pause"], bin_dir / "pause", "pause", entrypoint=("/pause",), user="65535:65535"
        ),
    ]
    local_path = f"local-path-provisioner-v{v['KIND_LOCAL_PATH_VERSION']}"
    specs += [
        ImageSpec(storage_images()[0], bin_dir / local_path, "local-path-provisioner"),
        ImageSpec(storage_images()[1], None, "", base=proxy_base),  # the base's shell
    ]
    return specs


def storage_images() -> tuple[str, str]:
    """The default StorageClass's provisioner and helper images."""
    version = versions()["KIND_LOCAL_PATH_VERSION"]
    return LOCAL_PATH_IMAGE.format(version=version), LOCAL_PATH_HELPER_IMAGE


def image_archive(spec: ImageSpec, cache: Path) -> Path:
    """The OCI archive of one image, made once per set of inputs."""
    inputs: list[str | Path] = [ARCHIVE_FORMAT, spec.ref, spec.path, *spec.entrypoint, spec.user]
    if spec.binary is not None:
        inputs.append(spec.binary)
    if spec.base is not None:
        inputs.append(spec.base)
    name = spec.ref.rsplit("/", 1)[1].replace(":", "-")
    archive = cache / f"{name}-{_digest(*inputs)[:16]}.tar"
    if archive.exists():
        return archive
    for old in cache.glob(f"{name}-*.tar"):
        old.unlink()
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        layers = []
        if spec.base is not None:
            layers.append(oci.tarball_layer(spec.base, Path(tmp) / "base.tar.gz"))
        if spec.binary is not None:
            files = [oci.File(spec.path, source=spec.binary, mode=0o755)]
            if spec.base is None:
                files += oci.scratch_files()
            layers.append(oci.files_layer(files, Path(tmp) / "binary.tar.gz"))
        oci.write_archive(archive, spec.ref, layers, entrypoint=spec.entrypoint, user=spec.user)
    return archive


def image_archives(bin_dir: Path, refs: dict[str, str], step: Step) -> list[Path]:
    cache = cache_root() / "kind-image"
    cache.mkdir(parents=True, exist_ok=True)
    proxy_base = debootstrap_tarball(PROXY_PACKAGES, "iptables", log_to=step.log)
    return [image_archive(spec, cache) for spec in image_specs(bin_dir, refs, proxy_base)]


# -- base, context, build ----------------------------------------------------------------------


def ensure_base(docker: DockerEngine, step: Step) -> str:
    """The debootstrapped node base, imported into the daemon; returns its reference."""
    packages_digest = _digest(*NODE_PACKAGES)[:8]
    tarball = debootstrap_tarball(NODE_PACKAGES, f"kind-node-{packages_digest}", log_to=step.log)
    ref = f"{BASE_REPOSITORY}:bookworm-{_digest(tarball)[:12]}"
    if docker.image_id(ref) is None:
        with tarball.open("rb") as f:
            step.run([docker.cli, "import", "-", ref], env=docker.env(), stdin=f)
        step.note("base imported")
    return ref


def _link(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def stage(root: Path, bin_dir: Path, archives: list[Path], refs: dict[str, str]) -> Path:
    """build/kind-node/: the Dockerfile's context (emptied first)."""
    context = root / STAGE_DIR
    shutil.rmtree(context, ignore_errors=True)
    shutil.copytree(root / NODE_FILES / "rootfs", context / "rootfs", symlinks=True)
    shutil.copy2(root / NODE_FILES / "Dockerfile", context / "Dockerfile")
    (context / "Dockerfile").chmod(0o644)
    # The node's files get the modes a root filesystem wants, whatever the checkout's umask
    # (and the inputs' digest does not depend on it).
    for path in (context / "rootfs").rglob("*"):
        if path.is_symlink():
            continue
        executable = path.is_dir() or path.stat().st_mode & 0o100
        path.chmod(0o755 if executable else 0o644)
    config = context / "rootfs/etc/containerd/config.toml"
    config.write_text(config.read_text().replace("@SANDBOX_IMAGE@", refs["pause"]))
    storage = context / "rootfs/kind/manifests/default-storage.yaml"
    provisioner, helper = storage_images()
    storage.write_text(
        storage.read_text()
        .replace("@LOCAL_PATH_IMAGE@", provisioner)
        .replace("@LOCAL_PATH_HELPER_IMAGE@", helper)
    )
    (context / "rootfs/kind/version").write_text(f"v{versions()['KUBE_VERSION']}\n")
    for tool in ("kubeadm", "kubelet", "kubectl"):
        _link(bin_dir / tool, context / "bin" / tool)
    for archive in archives:
        _link(archive, context / "images" / archive.name)
    return context


def context_digest(context: Path, base_id: str) -> str:
    """A digest of every staged file (path, mode, content) and the base image's ID."""
    parts: list[str | Path] = [base_id]
    for path in sorted(p for p in context.rglob("*") if p.is_file() or p.is_symlink()):
        parts += [str(path.relative_to(context)), oct(path.lstat().st_mode)]
        parts.append(os.readlink(path) if path.is_symlink() else path)
    return _digest(*parts)


def build(docker: DockerEngine, *, force: bool = False) -> str:
    """Build the node image unless it is up to date; returns its tag."""
    tag = node_tag()
    root = repo_root()
    bin_dir = kind_tools()
    with build_step("kind-image", tag) as step:
        refs = kubeadm_images(bin_dir, versions()["KUBE_VERSION"])
        archives = image_archives(bin_dir, refs, step)
        base = ensure_base(docker, step)
        base_id = docker.image_id(base) or ""
        context = stage(root, bin_dir, archives, refs)
        inputs = context_digest(context, base_id)
        have = docker.run(
            ["image", "inspect", "--format", f'{{{{index .Config.Labels "{INPUTS_LABEL}"}}}}', tag],
            capture=True, check=False,
        ).stdout.strip()  # fmt: skip
        if have == inputs and not force:
            step.cached()
            return tag
        step.write(f"images: {', '.join(sorted(refs.values()))}")
        step.run(
            [docker.cli, "build", "--network=none", "--build-arg", f"BASE_IMAGE={base}",
             "--label", f"{INPUTS_LABEL}={inputs}", "--label", f"{NODE_REPOSITORY}=1",
             "--tag", tag, str(context)],
            env=docker.env(),
        )  # fmt: skip
        # The image this one replaced, now untagged.
        step.run(
            [docker.cli, "image", "prune", "--force", "--filter", f"label={NODE_REPOSITORY}=1"],
            env=docker.env(),
        )
        size = docker.run(["image", "inspect", "--format", "{{.Size}}", tag], capture=True)
        step.note(f"{int(size.stdout.strip()) / 1e9:.1f} GB, {len(refs)} images inside")
    return tag


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recall_dev.kind_image", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the node image on the kind daemon (if not up to date)")
    b.add_argument("--force", action="store_true", help="build even when up to date")
    args = parser.parse_args(argv)
    with docker_engine(progress=False, daemon=KIND_DAEMON) as docker:
        print(build(docker, force=args.force))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
