"""Releases: one semantic version for the chart, the image and the CRDs (`make release`).

    python -m recall_dev.release build [--commit C] [--out DIR]
    python -m recall_dev.release verify DIR
    python -m recall_dev.release version

Contract:
- `version(root)` is the release's version, read from charts/recall/Chart.yaml, after
  checking that every place that carries it says the same: the chart's `version` and
  `appVersion`, pyproject.toml, `recall.__version__`, and the `app.kubernetes.io/version`
  label of every CRD (crds/ and the chart's copy). It must be a semantic version and have an
  entry in CHANGELOG.md (`## <version>`). Anything else raises `ReleaseError` saying where.
- `build(commit)` makes a release from a commit, never from the working tree (other people's
  uncommitted work is not in it): the commit's tree is `git archive`d into a temporary
  directory (removed afterwards), checked as above, and built into `<out>/<version>/`:
    recall-<v>.tgz            the chart (`helm package`)
    recall-image-<v>.tar      the image `recall:<v>` (`docker save`; recall_dev.image builds it
                              offline from that tree's Dockerfile and lock)
    recall-crds-<v>.yaml      the CRDs, one file (`kubectl apply -f` it before a chart with
                              crds.install=false)
    SHA256SUMS                the three files' SHA-256 (`sha256sum -c SHA256SUMS`)
    release.json              version, commit, image ID, files
  and ends by checking the directory against its SHA256SUMS (`verify`).
- `verify(directory)` checks a release directory: every file in it but SHA256SUMS and
  release.json is listed there, and every listed file is present with that digest; anything
  else raises `ReleaseError` naming the file.
  CHANGELOG.md records each release's version and commit (tags may not travel with the
  repository): `make release` prints the line to record for the commit it built.
- `chart_images(root)` builds the images the chart's default values name, under those names:
  `<image.repository>:<appVersion>` (`recall:<v>`) and the bundled store's
  `<store.bundled.image.repository>:<tag>` (SeaweedFS, built here from its Go module at the
  version the tag names, checked), and returns their archives: what `recall dev up --kind`
  and the pod tests load into a kind cluster, so the chart installs with its defaults.
Not provided: pushing, signing, other architectures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from recall_dev.cluster import repo_root
from recall_dev.docker import docker_engine, file_sha256

SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?$")
CHART = Path("charts/recall")
CRD_DIRS = (Path("crds"), CHART / "files" / "crds")
VERSION_LABEL = "app.kubernetes.io/version"
CHANGELOG = Path("CHANGELOG.md")
SUMS = "SHA256SUMS"
MANIFEST = "release.json"
SUM_LINE = re.compile(r"^([0-9a-f]{64}) [ *](.+)$")  # as sha256sum writes it (text or binary)


class ReleaseError(RuntimeError):
    """The tree does not make a consistent release."""


def _pyproject_version(root: Path) -> str:
    for line in (root / "pyproject.toml").read_text().splitlines():
        if line.startswith("version = "):
            return line.split("=", 1)[1].strip().strip('"')
    return ""


def _package_version(root: Path) -> str:
    text = (root / "operator/recall/__init__.py").read_text()
    found = re.search(r'^__version__ = "([^"]+)"$', text, re.MULTILINE)
    return found.group(1) if found else ""


def carriers(root: Path) -> dict[str, str]:
    """Every place that carries the release's version, and what it says."""
    chart = yaml.safe_load((root / CHART / "Chart.yaml").read_text())
    found = {
        "Chart.yaml version": str(chart.get("version", "")),
        "Chart.yaml appVersion": str(chart.get("appVersion", "")),
        "pyproject.toml": _pyproject_version(root),
        "recall.__version__": _package_version(root),
    }
    for directory in CRD_DIRS:
        for path in sorted((root / directory).glob("*.yaml")):
            doc = yaml.safe_load(path.read_text())
            labels = (doc.get("metadata") or {}).get("labels") or {}
            found[f"{path.relative_to(root)} label"] = str(labels.get(VERSION_LABEL, ""))
    return found


ENTRY = re.compile(r"^## (\S+)(?: — .*?)?(?:commit ([0-9a-f]{7,40}))?\s*$")


def changelog_entries(root: Path | None = None) -> list[tuple[str, str]]:
    """(version, commit) of each CHANGELOG.md entry, newest first: `## 0.1.0 — <date>, commit
    <sha>`; the commit is "" for one not released yet (`## 0.2.0 — unreleased`)."""
    path = (root or repo_root()) / CHANGELOG
    if not path.exists():
        return []
    entries = []
    for line in path.read_text().splitlines():
        found = ENTRY.match(line)
        if found:
            entries.append((found.group(1), found.group(2) or ""))
    return entries


def changelog_versions(root: Path) -> list[str]:
    """The versions CHANGELOG.md has an entry for, newest first."""
    return [v for v, _ in changelog_entries(root)]


def version(root: Path | None = None) -> str:
    """The release's version, once every carrier agrees (see the module contract)."""
    root = root or repo_root()
    found = carriers(root)
    chart_version = found["Chart.yaml version"]
    wrong = {where: v for where, v in found.items() if v != chart_version}
    if wrong:
        listed = ", ".join(f"{where} says {v or 'nothing'}" for where, v in wrong.items())
        raise ReleaseError(f"the chart is {chart_version}, but {listed}")
    if not SEMVER.match(chart_version):
        raise ReleaseError(f"{chart_version} is not a semantic version (MAJOR.MINOR.PATCH)")
    if chart_version not in changelog_versions(root):
        raise ReleaseError(f"CHANGELOG.md has no entry `## {chart_version}`")
    return chart_version


# -- images ------------------------------------------------------------------------------------


def chart_default_images(root: Path) -> tuple[str, str]:
    """(the recall image, the bundled store's image) as the chart's default values name them."""
    values = yaml.safe_load((root / CHART / "values.yaml").read_text())
    chart = yaml.safe_load((root / CHART / "Chart.yaml").read_text())
    image = values["image"]
    recall = f"{image['repository']}:{image.get('tag') or chart['appVersion']}"
    store = values["store"]["bundled"]["image"]
    return recall, f"{store['repository']}:{store['tag']}"


def chart_images(root: Path | None = None) -> list[Path]:
    """Build the chart's default images here and return their archives (module contract)."""
    from recall_dev import image, objstore_image
    from recall_dev.objstore import weed_bin_dir

    root = root or repo_root()
    recall, store = chart_default_images(root)
    weed = weed_bin_dir() / "weed"
    built = objstore_image.weed_version(weed)
    if store.rsplit(":", 1)[1] != built:
        raise ReleaseError(
            f"the chart's store image is {store}, but hack/seaweedfs builds SeaweedFS {built}"
        )
    with docker_engine(progress=False) as docker:
        archives = [image.save(recall, image.build(recall, docker, root=root), docker)]
        archives.append(objstore_image.save(store, objstore_image.build(store, docker), docker))
    return archives


# -- building a release ------------------------------------------------------------------------


@dataclass(frozen=True)
class Release:
    version: str
    commit: str
    directory: Path
    chart: Path
    image: Path
    crds: Path
    sums: Path


def resolve(commit: str, root: Path) -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--verify", f"{commit}^{{commit}}"],
        cwd=root, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        raise ReleaseError(f"no commit {commit}: {done.stderr.strip()}")
    return done.stdout.strip()


@contextlib.contextmanager
def checkout(commit: str, root: Path | None = None) -> Iterator[Path]:
    """The tree of `commit` in a temporary directory (`git archive`), removed afterwards; the
    checkout in `root` is not touched."""
    root = root or repo_root()
    full = resolve(commit, root)
    with tempfile.TemporaryDirectory(prefix=f"recall-{full[:7]}-") as tmp:
        archive = Path(tmp) / "tree.tar"
        subprocess.run(
            ["git", "archive", "--format=tar", f"--output={archive}", full], cwd=root, check=True
        )
        tree = Path(tmp) / "tree"
        tree.mkdir()
        with tarfile.open(archive) as tar:
            tar.extractall(tree, filter="data")
        archive.unlink()
        yield tree


def _crds_file(tree: Path, out: Path) -> Path:
    docs = [p.read_text().strip() for p in sorted((tree / "crds").glob("*.yaml"))]
    out.write_text("\n---\n".join(docs) + "\n")
    return out


def _helm() -> Path:
    from recall_dev.cluster import tools_bin_dir

    return tools_bin_dir() / "helm"


def _commit_time(commit: str, root: Path) -> str:
    return subprocess.run(
        ["git", "log", "-1", "--format=%ct", commit], cwd=root, capture_output=True, text=True
    ).stdout.strip()


def build(commit: str = "HEAD", out: Path | None = None, *, checked: bool = True) -> Release:
    """Build the release of `commit` into `<out>/<version>/` (see the module contract).
    `checked=False` takes the chart's version unchecked: a commit from before releases
    carried one version everywhere (the first release, 0.1.0)."""
    root = repo_root()
    full = resolve(commit, root)
    out = (out or root / "build" / "release").resolve()
    from recall_dev import image

    with checkout(full, root) as tree:
        if checked:
            v = version(tree)
        else:
            v = str(yaml.safe_load((tree / CHART / "Chart.yaml").read_text())["version"])
        target = out / v
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        subprocess.run(
            [str(_helm()), "package", str(tree / CHART), "--destination", str(target)],
            check=True, capture_output=True,
        )  # fmt: skip
        chart = target / f"recall-{v}.tgz"
        if not chart.exists():
            raise ReleaseError(f"helm package made no {chart.name}")
        tag = f"recall:{v}"
        with docker_engine(progress=False) as docker:
            # The wheel's timestamps are the commit's (no git in the tree): the same commit
            # makes the same wheel.
            image_id = image.build(tag, docker, root=tree, epoch=_commit_time(full, root))
            saved = image.save(tag, image_id, docker)
        image_archive = target / f"recall-image-{v}.tar"
        shutil.copyfile(saved, image_archive)
        crds = _crds_file(tree, target / f"recall-crds-{v}.yaml")
    digests = {f.name: file_sha256(f) for f in (chart, image_archive, crds)}
    sums = target / SUMS
    sums.write_text("".join(f"{digest}  {name}\n" for name, digest in digests.items()))
    manifest = {
        "version": v,
        "commit": full,
        "image": {"tag": tag, "id": image_id},
        "files": digests,
    }
    (target / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    verify(target)
    return Release(v, full, target, chart, image_archive, crds, sums)


def verify(directory: Path) -> dict[str, str]:
    """Check a release directory against its SHA256SUMS (see the module contract); returns
    each listed file's digest."""
    sums = directory / SUMS
    if not sums.exists():
        raise ReleaseError(f"{directory} has no {SUMS}")
    listed: dict[str, str] = {}
    for n, line in enumerate(sums.read_text().splitlines(), 1):
        found = SUM_LINE.match(line)
        if not found:
            raise ReleaseError(f"{SUMS} line {n} is not `<sha256>  <file>`: {line!r}")
        listed[found.group(2)] = found.group(1)
    present = {p.name for p in directory.iterdir() if p.is_file()} - {SUMS, MANIFEST}
    unlisted = sorted(present - set(listed))
    if unlisted:
        raise ReleaseError(f"not listed in {SUMS}: {', '.join(unlisted)}")
    for name, digest in listed.items():
        path = directory / name
        if not path.is_file():
            raise ReleaseError(f"{name}, listed in {SUMS}, is missing")
        if file_sha256(path) != digest:
            raise ReleaseError(f"{name} does not match its SHA-256 in {SUMS}")
    return listed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recall_dev.release", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build a release's artifacts from a commit")
    b.add_argument("--commit", default="HEAD")
    b.add_argument("--out", type=Path, default=None, help="default: build/release/")
    c = sub.add_parser("verify", help="check a release directory against its SHA256SUMS")
    c.add_argument("directory", type=Path)
    sub.add_parser("version", help="print the release's version (after checking it)")
    args = parser.parse_args(argv)
    if args.command == "version":
        print(version())
        return 0
    if args.command == "verify":
        try:
            checked = verify(args.directory)
        except ReleaseError as e:
            print(f"verify: {e}")
            return 1
        print("\n".join(f"{name}: OK" for name in checked))
        return 0
    release = build(args.commit, args.out)
    print(f"release {release.version} of commit {release.commit[:12]} in {release.directory}:")
    print(release.sums.read_text().rstrip())
    day = subprocess.run(
        ["git", "log", "-1", "--format=%cs", release.commit],
        cwd=repo_root(), capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    print(f"CHANGELOG.md: ## {release.version} — {day}, commit {release.commit[:12]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
