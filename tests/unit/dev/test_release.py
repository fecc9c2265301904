"""One version for the chart, the image and the CRDs (recall_dev.release): the checkout agrees
with itself, a tree that does not is refused naming where, and CHANGELOG.md's entries give each
release's commit. `build` runs on a repository of one commit with a fake helm and a fake image
build: its SHA256SUMS lists every artifact with its digest (as `sha256sum -c` reads it), a
tampered, missing or unlisted artifact fails `verify`, and `checked=True` refuses a commit
whose versions disagree."""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from recall_dev import image, release

ROOT = Path(__file__).resolve().parents[3]


def tree(tmp_path: Path) -> Path:
    """The files that carry the version, copied."""
    for name in ("pyproject.toml", "CHANGELOG.md", "operator/recall/__init__.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tmp_path / name)
    for d in ("crds", "charts/recall"):
        shutil.copytree(ROOT / d, tmp_path / d)
    return tmp_path


def test_version__the_chart_the_package_and_every_crd_say_the_same() -> None:
    v = release.version(ROOT)
    assert release.SEMVER.match(v)
    assert set(release.carriers(ROOT).values()) == {v}
    assert len([w for w in release.carriers(ROOT) if w.endswith(" label")]) == 4


def test_version__a_crd_left_behind_is_named(tmp_path: Path) -> None:
    root = tree(tmp_path)
    crd = root / "charts/recall/files/crds/batches.recall.dev.yaml"
    v = release.version(ROOT)
    crd.write_text(crd.read_text().replace(f'app.kubernetes.io/version: "{v}"', '"x": "y"'))
    with pytest.raises(
        release.ReleaseError, match=r"batches\.recall\.dev\.yaml label says nothing"
    ):
        release.version(root)


def test_version__needs_its_changelog_entry(tmp_path: Path) -> None:
    root = tree(tmp_path)
    (root / "CHANGELOG.md").write_text("# Changelog\n\n## 0.0.1 — 2026-01-01, commit abcdef1\n")
    with pytest.raises(release.ReleaseError, match=r"CHANGELOG\.md has no entry"):
        release.version(root)


def test_changelog__each_entry_its_version_and_commit(tmp_path: Path) -> None:
    (tmp_path / "CHANGELOG.md").write_text(
        "# Changelog\n\ntext\n\n## 1.2.0 — unreleased\n\n- x\n\n"
        "## 1.1.0 — 2026-12-01, commit 4089330\n\n## 1.0.0 — 2026-11-01, commit "
        "0123456789abcdef0123456789abcdef01234567\n"
    )
    assert release.changelog_entries(tmp_path) == [
        ("1.2.0", ""),
        ("1.1.0", "4089330"),
        ("1.0.0", "0123456789abcdef0123456789abcdef01234567"),
    ]


def test_changelog__the_previous_release_is_a_commit_of_this_repository() -> None:
    _, (_, previous) = release.changelog_entries(ROOT)[:2]
    assert release.resolve(previous, ROOT)


def test_chart_default_images__what_dev_up_and_the_pod_tests_load() -> None:
    recall, store = release.chart_default_images(ROOT)
    assert recall == f"recall:{release.version(ROOT)}"
    assert store.startswith("chrislusf/seaweedfs:")


# -- building a release (`make release`), with the image build and helm made small ---------------

FAKE_HELM = """#!{python}
# `helm package <chart> --destination <dir>`, as far as build() uses it
import pathlib, sys, tarfile, yaml
_, command, chart, _, destination = sys.argv
assert command == "package"
version = yaml.safe_load((pathlib.Path(chart) / "Chart.yaml").read_text())["version"]
with tarfile.open(pathlib.Path(destination) / f"recall-{{version}}.tgz", "w:gz") as tar:
    tar.add(chart, arcname="recall")
"""


def git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=root, check=True, capture_output=True,
    )  # fmt: skip


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository of the files that carry the version, one commit; `build` runs on it with a
    fake helm and a fake image build (an archive of a few bytes)."""
    root = tree(tmp_path / "repo")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "a release")
    helm = tmp_path / "helm"
    helm.write_text(FAKE_HELM.format(python=sys.executable))
    helm.chmod(0o755)

    def save(tag: str, image_id: str, docker: object) -> Path:
        archive = tmp_path / "image.tar"
        archive.write_bytes(f"{tag} {image_id}".encode())
        return archive

    @contextlib.contextmanager
    def docker_engine(progress: bool = True) -> Iterator[object]:
        yield object()

    monkeypatch.setattr(release, "repo_root", lambda: root)
    monkeypatch.setattr(release, "_helm", lambda: helm)
    monkeypatch.setattr(release, "docker_engine", docker_engine)
    monkeypatch.setattr(image, "build", lambda tag, docker, **_: "sha256:" + "0" * 64)
    monkeypatch.setattr(image, "save", save)
    return root


def sha256sum_check(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sha256sum", "-c", "SHA256SUMS"], cwd=directory, capture_output=True, text=True
    )


def test_build__sha256sums_lists_every_artifact_with_its_digest(repo: Path, tmp_path: Path) -> None:
    built = release.build("HEAD", tmp_path / "out", checked=True)
    v = release.version(ROOT)
    assert built.directory == tmp_path / "out" / v
    names = [f"recall-{v}.tgz", f"recall-image-{v}.tar", f"recall-crds-{v}.yaml"]
    lines = built.sums.read_text().splitlines()
    assert lines == [
        f"{hashlib.sha256((built.directory / n).read_bytes()).hexdigest()}  {n}" for n in names
    ]
    assert sha256sum_check(built.directory).returncode == 0
    assert set(release.verify(built.directory)) == set(names)
    manifest = json.loads((built.directory / "release.json").read_text())
    assert manifest["files"] == release.verify(built.directory)
    assert manifest["commit"] == built.commit and manifest["version"] == v


def test_verify__a_tampered_missing_or_unlisted_artifact_fails(repo: Path, tmp_path: Path) -> None:
    built = release.build("HEAD", tmp_path / "out", checked=True)
    with built.crds.open("a") as f:
        f.write("# changed\n")
    with pytest.raises(release.ReleaseError, match=r"recall-crds-.*\.yaml does not match"):
        release.verify(built.directory)
    assert sha256sum_check(built.directory).returncode != 0
    assert release.main(["verify", str(built.directory)]) == 1

    built = release.build("HEAD", tmp_path / "out", checked=True)
    (built.directory / "extra.bin").write_bytes(b"x")
    with pytest.raises(release.ReleaseError, match=r"not listed in SHA256SUMS: extra\.bin"):
        release.verify(built.directory)
    (built.directory / "extra.bin").unlink()
    built.image.unlink()
    with pytest.raises(release.ReleaseError, match=r"recall-image-.*\.tar, listed .* is missing"):
        release.verify(built.directory)


def test_build__checked_refuses_a_commit_whose_versions_disagree(
    repo: Path, tmp_path: Path
) -> None:
    crd = repo / "crds/batches.recall.dev.yaml"
    v = release.version(ROOT)
    crd.write_text(crd.read_text().replace(f'app.kubernetes.io/version: "{v}"', '"x": "y"'))
    git(repo, "commit", "-q", "-am", "a CRD left behind")
    with pytest.raises(release.ReleaseError, match=r"crds/batches\.recall\.dev\.yaml label"):
        release.build("HEAD", tmp_path / "out", checked=True)
    # A commit from before releases carried one version everywhere: the chart's is taken.
    built = release.build("HEAD", tmp_path / "out", checked=False)
    assert built.version == v and release.verify(built.directory)
