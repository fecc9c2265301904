"""Build the project's image from its Dockerfile, offline, and export it for a node.

    python -m recall_dev.image build [--tag T] [--save PATH]     (`make image`)
    python -m recall_dev.image build --variant cuda              (`make image-cuda`)
    python -m recall_dev.image build --variant multilingual      (`make image-multilingual`)

Variants from one Dockerfile (its `VARIANT` argument): `cpu`, tagged recall.local/recall:dev,
and `cuda`, tagged recall.local/recall:dev-cuda, which adds the CUDA libraries CTranslate2
loads on a GPU (the wheels of hack/image/requirements-cuda.lock, staged as the others are);
`multilingual` and `cuda-multilingual` add to either the multilingual base model's two wheels
(hack/image/requirements-multilingual.lock: about 133 MB compressed, 148 MB installed).

Steps, each cached under ~/.cache/recall/image so a second build only redoes what changed:
1. **Wheels.** Every dependency pinned in hack/image/requirements.lock is downloaded on the host
   (the host's pip reaches the index with the host's CA bundle; a build container would not),
   for the image's platform — CPython 3.11, manylinux x86_64 up to glibc 2.36 (bookworm) —
   with pip's `--require-hashes`, into a directory named after the lock's own hash. The
   project's wheel is built from pyproject.toml and operator/ with SOURCE_DATE_EPOCH set to the
   last commit's time. Both are staged in build/image/ (ignored by git, not by docker); the
   cuda variant's wheels in build/image/wheels-cuda/.
2. **Base.** `BASE_IMAGE` when set; else the Dockerfile's default (the official Python image,
   by digest) when the daemon already has it; else a Debian bookworm made with
   `debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates` and
   `docker import`, tagged with the hash of its tarball (the tarball is cached).
3. **Build.** `docker build --network=none`: the Dockerfile installs only from build/image/.
   An image whose ID did not change is reported as up to date.

`save()` writes the image as a `docker save` archive (cached by image ID) for
`ctr images import` on the node. Nothing here pushes or pulls an image.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from recall_dev.buildlog import BuildError, Step, build_step
from recall_dev.cluster import repo_root
from recall_dev.docker import DockerEngine, cache_root, docker_engine, file_sha256

DEFAULT_TAG = "recall.local/recall:dev"
LOCK_FILE = Path("hack/image/requirements.lock")
CUDA_LOCK_FILE = Path("hack/image/requirements-cuda.lock")
MULTILINGUAL_LOCK_FILE = Path("hack/image/requirements-multilingual.lock")
SPEAKERS_LOCK_FILE = Path("hack/image/requirements-speakers.lock")  # every variant: --no-deps
# Per variant: the staged wheel directories (under build/image/) and the lock each comes from.
VARIANTS: dict[str, dict[str, Path]] = {
    "cpu": {"wheels": LOCK_FILE, "wheels-speakers": SPEAKERS_LOCK_FILE},
    "cuda": {
        "wheels": LOCK_FILE,
        "wheels-speakers": SPEAKERS_LOCK_FILE,
        "wheels-cuda": CUDA_LOCK_FILE,
    },
    "multilingual": {
        "wheels": LOCK_FILE,
        "wheels-speakers": SPEAKERS_LOCK_FILE,
        "wheels-multilingual": MULTILINGUAL_LOCK_FILE,
    },
    "cuda-multilingual": {
        "wheels": LOCK_FILE,
        "wheels-speakers": SPEAKERS_LOCK_FILE,
        "wheels-cuda": CUDA_LOCK_FILE,
        "wheels-multilingual": MULTILINGUAL_LOCK_FILE,
    },
}
STAGE_DIR = Path("build/image")
# The image's interpreter and C library: Debian bookworm's python3 (3.11) and glibc 2.36. pip
# does not widen an explicit --platform to older glibc versions, so every one is listed.
PYTHON_VERSION = "3.11"
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(36, 16, -1)] + [
    "manylinux2014_x86_64"
]
ABIS = ["cp311", "abi3", "none"]
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
BASE_REPOSITORY = "recall.local/python-base"
ARCHIVE_KEEP_SECONDS = 3600


class ImageError(RuntimeError):
    """The image could not be built."""


def image_cache() -> Path:
    d = cache_root() / "image"
    d.mkdir(parents=True, exist_ok=True)
    return d


# -- 1. wheels ---------------------------------------------------------------------------------


def _run(cmd: list[str], step: Step | None, **kw: Any) -> None:
    """A build command: its output to the step's log, or to the terminal without a step."""
    if step is not None:
        step.run(cmd, **kw)
    else:
        subprocess.run(cmd, check=True, **kw)


def default_tag(variant: str = "cpu") -> str:
    """`make image`'s tag, with `-<variant>` after it for a variant other than cpu."""
    return DEFAULT_TAG if variant == "cpu" else f"{DEFAULT_TAG}-{variant}"


def download_wheels(root: Path, step: Step | None = None, lock_file: Path = LOCK_FILE) -> Path:
    """The locked dependencies' wheels for the image's platform, hash-checked; cached per lock."""
    lock = root / lock_file
    target = image_cache() / f"wheels-{file_sha256(lock)[:16]}"
    if (target / ".complete").exists():
        return target
    partial = Path(tempfile.mkdtemp(prefix="wheels-", dir=image_cache()))
    cmd = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes",
        "--only-binary=:all:", f"--python-version={PYTHON_VERSION}", "--implementation=cp",
        *(f"--platform={p}" for p in PLATFORMS), *(f"--abi={a}" for a in ABIS),
        "--requirement", str(lock), "--dest", str(partial),
    ]  # fmt: skip
    env = dict(os.environ)
    env.pop("PIP_FIND_LINKS", None)  # only what the lock names, from the index
    try:
        _run(cmd, step, env=env)
    except (subprocess.CalledProcessError, BuildError) as e:
        shutil.rmtree(partial, ignore_errors=True)
        raise ImageError("downloading the locked wheels failed (see pip's output)") from e
    (partial / ".complete").touch()
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return target


def build_project_wheel(root: Path, dist: Path, step: Step | None = None, epoch: str = "") -> Path:
    """The project's wheel, built from the checkout into `dist` (emptied first); its file
    times are `epoch` (seconds), else the checkout's last commit's."""
    shutil.rmtree(dist, ignore_errors=True)
    dist.mkdir(parents=True)
    env = dict(os.environ)
    commit_time = (
        epoch
        or subprocess.run(
            ["git", "log", "-1", "--format=%ct"], cwd=root, text=True, capture_output=True
        ).stdout.strip()
    )
    if commit_time:
        env["SOURCE_DATE_EPOCH"] = commit_time
    _run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(dist),
         str(root)],
        step, env=env, cwd=root,
    )  # fmt: skip
    wheels = list(dist.glob("recall_operator-*.whl"))
    if len(wheels) != 1:
        raise ImageError(f"expected one project wheel in {dist}, found {wheels}")
    return wheels[0]


def stage(root: Path, step: Step | None = None, epoch: str = "", variant: str = "cpu") -> Path:
    """Fill build/image/ (the variant's wheel directories and dist/) in the checkout: the build
    context's offline inputs. A lock file the checkout lacks (an older release, built from its
    commit) stages no directory: that tree's Dockerfile names none; the main lock must be
    there."""
    staging = root / STAGE_DIR
    for directory, lock_file in VARIANTS[variant].items():
        if lock_file != LOCK_FILE and not (root / lock_file).exists():
            continue
        wheels = download_wheels(root, step, lock_file)
        staged = staging / directory
        shutil.rmtree(staged, ignore_errors=True)
        staged.mkdir(parents=True)
        for wheel in wheels.glob("*.whl"):
            try:
                os.link(wheel, staged / wheel.name)
            except OSError:
                shutil.copy2(wheel, staged / wheel.name)
    build_project_wheel(root, staging / "dist", step, epoch)
    return staging


# -- 2. base -----------------------------------------------------------------------------------


def default_base(root: Path) -> str:
    """The Dockerfile's default BASE_IMAGE."""
    for line in (root / "Dockerfile").read_text().splitlines():
        if line.startswith("ARG BASE_IMAGE="):
            return line.split("=", 1)[1].strip()
    raise ImageError("the Dockerfile declares no ARG BASE_IMAGE default")


BASE_INCLUDE = ("python3", "python3-venv", "ca-certificates")


def debootstrap_tarball(
    include: Sequence[str] = BASE_INCLUDE, name: str = "minbase-python3", log_to: Path | None = None
) -> Path:
    """A root filesystem of Debian bookworm (minbase + `include`), cached as `<suite>-<name>.tar`;
    debootstrap's output goes to `log_to` when given."""
    tarball = image_cache() / f"{DEBIAN_SUITE}-{name}.tar"
    if tarball.exists():
        return tarball
    if shutil.which("debootstrap") is None:
        raise ImageError("debootstrap is missing: run hack/install-system-deps.sh")
    rootfs = Path(tempfile.mkdtemp(prefix="rootfs-", dir=image_cache()))
    try:
        log_file = log_to.open("ab") if log_to is not None else None
        try:
            subprocess.run(
                ["debootstrap", "--variant=minbase", f"--include={','.join(include)}",
                 DEBIAN_SUITE, str(rootfs), DEBIAN_MIRROR],
                check=True, stdout=log_file or subprocess.DEVNULL, stderr=log_file,
            )  # fmt: skip
        finally:
            if log_file is not None:
                log_file.close()
        # What debootstrap leaves that no image needs: the package lists and caches.
        for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for child in (rootfs / leftover).glob("*"):
                if child.is_file():
                    child.unlink()
        partial = tarball.with_suffix(".partial")
        with tarfile.open(partial, "w") as tar:
            for entry in sorted(rootfs.iterdir()):
                tar.add(entry, arcname=entry.name, filter=_normalise)
        partial.rename(tarball)
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
    return tarball


def _normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.mtime = min(info.mtime, 1_700_000_000)
    return info


def ensure_base(root: Path, docker: DockerEngine, step: Step | None = None) -> str:
    """The base image to build on, present in the daemon (see the module docstring)."""
    explicit = os.environ.get("BASE_IMAGE")
    if explicit:
        return explicit
    official = default_base(root)
    if docker.image_id(official):
        return official
    tarball = debootstrap_tarball(log_to=step.log if step else None)
    ref = f"{BASE_REPOSITORY}:{DEBIAN_SUITE}-{file_sha256(tarball)[:12]}"
    if docker.image_id(ref) is None:
        with tarball.open("rb") as f:
            _run([docker.cli, "import", "-", ref], step, stdin=f, env=docker.env())
    return ref


# -- 3. build ----------------------------------------------------------------------------------


def build(
    tag: str = "",
    docker: DockerEngine | None = None,
    *,
    root: Path | None = None,
    epoch: str = "",
    variant: str = "cpu",
) -> str:
    """Build the image's `variant` from the Dockerfile of `root` (the checkout by default; a
    release's tree for recall_dev.release) as `tag` (default_tag(variant) when empty); returns
    its image ID. Says one line (recall_dev.buildlog); pip's, debootstrap's and docker's output
    go to its log."""
    if variant not in VARIANTS:
        raise ImageError(f"no image variant {variant!r}: {', '.join(VARIANTS)}")
    tag = tag or default_tag(variant)
    if docker is None:
        with docker_engine(progress=False) as engine:
            return build(tag, engine, root=root, epoch=epoch, variant=variant)
    root = root or repo_root()
    log_name = "image" if variant == "cpu" else f"image-{variant}"
    with build_step(log_name, tag) as step:
        before = docker.image_id(tag)
        stage(root, step, epoch, variant)
        base = ensure_base(root, docker, step)
        step.run(
            [docker.cli, "build", "--network=none", "--build-arg", f"BASE_IMAGE={base}",
             "--build-arg", f"VARIANT={variant}", "--tag", tag, str(root)],
            env=docker.env(),
        )  # fmt: skip
        image_id = docker.image_id(tag)
        if image_id is None:
            raise ImageError(f"docker build succeeded but {tag} is not in the daemon")
        if image_id == before:
            step.cached()
        step.note(image_id[:19])
    return image_id


def save(tag: str, image_id: str, docker: DockerEngine) -> Path:
    """`docker save` of the image, cached by image ID (archives of other images are removed
    once an hour old: a test run beside this one may still be loading the one it was given)."""
    # By image and tag: one image saved under two tags is two archives, each naming its own.
    tag_digest = hashlib.sha256(tag.encode()).hexdigest()[:8]
    archive = image_cache() / f"recall-{image_id.removeprefix('sha256:')[:16]}-{tag_digest}.tar"
    if archive.exists():
        return archive
    for old in image_cache().glob("recall-*.tar"):
        with contextlib.suppress(OSError):
            if old.stat().st_mtime < time.time() - ARCHIVE_KEEP_SECONDS:
                old.unlink()
    partial = archive.with_suffix(".partial")
    docker.run(["save", "--output", str(partial), tag])
    partial.rename(archive)
    return archive


def build_and_save(tag: str = "", variant: str = "cpu") -> Path:
    """Build the image and export it: the archive a node imports."""
    tag = tag or default_tag(variant)
    with docker_engine(progress=False) as docker:
        image_id = build(tag, docker, variant=variant)
        return save(tag, image_id, docker)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recall_dev.image", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the image (and export it with --save)")
    b.add_argument("--variant", choices=sorted(VARIANTS), default="cpu")
    b.add_argument("--tag", default="", help="default: recall.local/recall:dev[-<variant>]")
    b.add_argument("--save", action="store_true", help="also write the docker save archive")
    args = parser.parse_args(argv)
    if args.save:
        print(build_and_save(args.tag, args.variant))
    else:
        print(build(args.tag, variant=args.variant))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
