"""One version for the chart, the image and the CRDs (recall_dev.release), checked without
building anything: the checkout agrees with itself, a tree that does not is refused naming
where, and CHANGELOG.md's entries give each release's commit."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from recall_dev import release

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
