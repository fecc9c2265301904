"""The object store's image for pods: `recall.local/seaweedfs:<weed version>`, offline.

    python -m recall_dev.objstore_image build [--save]

The image is the static `weed` that `hack/seaweedfs/build.sh` builds, and nothing else but
the directories weed needs: /usr/bin/weed, /tmp (mode 1777: weed puts its gRPC sockets
there) and /data (owned by 65532, the image's user). It is made with `docker import` from a
tarball written here (no Dockerfile, no base image, no network), entrypoint `weed`, user
65532:65532.

Contract:
- `build()` makes the image only when the daemon has none with this tag whose label
  `dev.recall.weed-sha256` is the binary's hash: a second call is a no-op until the binary
  changes (a rebuilt weed, a new SeaweedFS version).
- `save()` writes a `docker save` archive for `ctr images import` on a node, cached by
  image ID under ~/.cache/recall/image (older seaweedfs archives are removed).
- The Docker engine is `recall_dev.docker`'s (the running one, or a private dockerd).

Not provided: pushing or pulling, other architectures than the build machine's.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import subprocess
import tarfile
import tempfile
from pathlib import Path

from recall_dev.buildlog import build_step
from recall_dev.docker import DockerEngine, docker_engine, file_sha256
from recall_dev.image import image_cache
from recall_dev.objstore import weed_bin_dir

REPOSITORY = "recall.local/seaweedfs"
HASH_LABEL = "dev.recall.weed-sha256"
USER = 65532  # the "nonroot" of distroless images
# A fixed modification time: the same weed makes the same layer bytes.
MTIME = 1_700_000_000


class ObjectStoreImageError(RuntimeError):
    """The object store's image could not be built."""


def weed_version(weed: Path) -> str:
    """The SeaweedFS version `weed version` reports (e.g. `4.53`)."""
    out = subprocess.run([str(weed), "version"], check=True, capture_output=True, text=True)
    words = out.stdout.split()  # "version 30GB 4.53 linux amd64"
    for i, word in enumerate(words[:-1]):
        if word == "version":
            return words[i + 2] if words[i + 1].endswith("GB") else words[i + 1]
    raise ObjectStoreImageError(f"cannot read a version from `weed version`: {out.stdout!r}")


def default_tag(weed: Path | None = None) -> str:
    return f"{REPOSITORY}:{weed_version(weed or weed_bin_dir() / 'weed')}"


def write_rootfs(weed: Path, tarball: Path) -> None:
    """The image's whole filesystem: weed, /tmp and /data (see the module docstring)."""

    def entry(name: str, kind: bytes, mode: int, uid: int = 0) -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.uid, info.gid, info.mtime = kind, mode, uid, uid, MTIME
        return info

    with tarfile.open(tarball, "w") as tar:
        for name, mode, uid in (("usr", 0o755, 0), ("usr/bin", 0o755, 0), ("tmp", 0o1777, 0),
                                ("data", 0o755, USER)):  # fmt: skip
            tar.addfile(entry(name, tarfile.DIRTYPE, mode, uid))
        binary = entry("usr/bin/weed", tarfile.REGTYPE, 0o755)
        binary.size = weed.stat().st_size
        with weed.open("rb") as f:
            tar.addfile(binary, f)
        # weed looks itself and its user up nowhere, but a shell-less image still wants a
        # passwd line for the numeric user (kubectl exec, ps, audit logs).
        passwd = f"nonroot:x:{USER}:{USER}:nonroot:/data:/sbin/nologin\n".encode()
        tar.addfile(entry("etc", tarfile.DIRTYPE, 0o755))
        info = entry("etc/passwd", tarfile.REGTYPE, 0o644)
        info.size = len(passwd)
        tar.addfile(info, io.BytesIO(passwd))


def build(tag: str = "", docker: DockerEngine | None = None, weed: Path | None = None) -> str:
    """The image `tag` (default: `default_tag()`) in the daemon, made only when missing or
    when its weed differs from `weed`; returns its image ID."""
    weed = weed or weed_bin_dir() / "weed"
    tag = tag or default_tag(weed)
    if docker is None:
        with docker_engine() as engine:
            return build(tag, engine, weed)
    digest = file_sha256(weed)
    if docker.image_id(tag) is not None:
        done = docker.run(
            ["image", "inspect", "--format", f'{{{{index .Config.Labels "{HASH_LABEL}"}}}}', tag],
            capture=True,
            check=False,
        )
        if done.stdout.strip() == digest:
            image_id = docker.image_id(tag)
            assert image_id is not None
            return image_id
    with (
        build_step("seaweedfs-image", tag) as step,
        tempfile.TemporaryDirectory(prefix="seaweedfs-image-", dir=image_cache()) as tmp,
    ):
        step.write(f"weed {weed} (sha256 {digest})")
        rootfs = Path(tmp) / "rootfs.tar"
        write_rootfs(weed, rootfs)
        changes = [
            'ENTRYPOINT ["/usr/bin/weed"]',
            f"USER {USER}:{USER}",
            "WORKDIR /data",
            f"LABEL {HASH_LABEL}={digest}",
            "LABEL org.opencontainers.image.title=seaweedfs",
            "LABEL org.opencontainers.image.licenses=Apache-2.0",
        ]
        args = ["import", *(a for c in changes for a in ("--change", c)), str(rootfs), tag]
        done = docker.run(args, capture=True)
        step.write(done.stdout or "")
        image_id = docker.image_id(tag)
        if image_id is None:
            raise ObjectStoreImageError(f"docker import succeeded but {tag} is not in the daemon")
    return image_id


def save(tag: str, image_id: str, docker: DockerEngine) -> Path:
    """`docker save` of the image, cached by image ID (older archives are removed)."""
    # By image and tag (archives of the same image under another tag stay: a test run beside
    # this one may be loading it).
    tag_digest = hashlib.sha256(tag.encode()).hexdigest()[:8]
    archive = image_cache() / f"seaweedfs-{image_id.removeprefix('sha256:')[:16]}-{tag_digest}.tar"
    if archive.exists():
        return archive
    for old in image_cache().glob(f"seaweedfs-*-{tag_digest}.tar"):
        old.unlink()
    partial = archive.with_suffix(".partial")
    docker.run(["save", "--output", str(partial), tag])
    partial.rename(archive)
    return archive


def build_and_save(tag: str = "") -> Path:
    """Build the image (if needed) and export it: the archive a node imports."""
    with docker_engine() as docker:
        weed = weed_bin_dir() / "weed"
        tag = tag or default_tag(weed)
        return save(tag, build(tag, docker, weed), docker)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m recall_dev.objstore_image", description=__doc__
    )
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the image (and export it with --save)")
    b.add_argument("--tag", default="", help=f"default: {REPOSITORY}:<weed version>")
    b.add_argument("--save", action="store_true", help="also write the docker save archive")
    args = parser.parse_args(argv)
    print(build_and_save(args.tag) if args.save else build(args.tag))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
