"""Packaged models: joined from their installed packages into the model cache, checked against
the pinned sha256, once per cache; a missing package or a changed byte fails the job for good.
The last test joins the real multilingual base model from its two wheels."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from recall.engines.models import BASE, ModelCache
from recall.engines.models.manifests import MANIFEST
from recall.engines.models.packaged import Packaged, package_file
from recall.engines.whisper import language
from recall.resources.errors import JobFailure


def fake_packages(root: Path, payload: bytes = b"weights" * 1000) -> Packaged:
    """Two importable packages holding a model split in two, and its description."""
    for n in (1, 2):
        pkg = root / f"fakemodel_part{n}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
    half = len(payload) // 2
    (root / "fakemodel_part1/data/model.bin.part1").write_bytes(payload[:half])
    (root / "fakemodel_part2/data/model.bin.part2").write_bytes(payload[half:])
    (root / "fakemodel_part1/data/config.json").write_text("{}")
    return Packaged(
        name="fake",
        extra="fakeextra",
        parts={
            "model.bin": (
                "fakemodel_part1/data/model.bin.part1",
                "fakemodel_part2/data/model.bin.part2",
            ),
            "config.json": ("fakemodel_part1/data/config.json",),
        },
        sha256={
            "model.bin": hashlib.sha256(payload).hexdigest(),
            "config.json": hashlib.sha256(b"{}").hexdigest(),
        },
    )


def test_packaged__joined_once_into_the_cache_under_its_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    model = fake_packages(tmp_path / "site")
    with capture_logs() as logs:
        local = ModelCache(tmp_path / "cache", None).packaged(model)
    assert local.path == tmp_path / "cache" / model.digest.replace(":", "-")
    assert (local.path / "model.bin").read_bytes() == b"weights" * 1000
    assert (local.path / MANIFEST).is_file() and local.digest == model.digest
    assert [e["event"] for e in logs] == ["model_fetched"]
    # Another process (a new cache object) finds it in place: nothing joined again.
    (tmp_path / "site/fakemodel_part2/data/model.bin.part2").unlink()
    with capture_logs() as logs:
        again = ModelCache(tmp_path / "cache", None).packaged(model)
    assert again == local and [e["event"] for e in logs] == ["model_cached"]
    # Its copy is checked like any local model directory.
    assert ModelCache(tmp_path / "other", None).local(local.path, "x").digest == model.digest


def test_packaged__a_missing_package_fails_for_good_naming_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    model = fake_packages(tmp_path / "site")
    (tmp_path / "site/fakemodel_part2/data/model.bin.part2").unlink()
    with pytest.raises(JobFailure) as info:
        ModelCache(tmp_path / "cache", None).packaged(model)
    assert info.value.reason == "ModelNotFound" and info.value.permanent
    assert "recall-operator[fakeextra]" in str(info.value) and "fakemodel-part2" in str(info.value)
    assert not (tmp_path / "cache" / model.digest.replace(":", "-")).exists()


def test_packaged__bytes_unlike_the_pins_fail_and_leave_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    model = fake_packages(tmp_path / "site")
    (tmp_path / "site/fakemodel_part2/data/model.bin.part2").write_bytes(b"tampered")
    with pytest.raises(JobFailure) as info:
        ModelCache(tmp_path / "cache", None).packaged(model)
    assert info.value.reason == "ModelCorrupt" and info.value.permanent
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")] == []


def test_packaged__the_multilingual_base_model_equals_the_upstream_files(tmp_path: Path) -> None:
    """recall[multilingual] (installed by make test): the joined model.bin is the upstream
    Systran/faster-whisper-base model.bin, 145,217,532 bytes, and faster-whisper loads it as a
    multilingual model."""
    assert package_file(BASE.parts["model.bin"][1]) is not None, "pip install -e '.[multilingual]'"
    local = ModelCache(tmp_path, None).packaged(BASE)
    assert (local.path / "model.bin").stat().st_size == 145_217_532
    assert local.digest == "sha256:753752d23a0ca8d880170d14cfe69c36b904d2864fb4e6943570ffd0228b6c20"
    from faster_whisper import WhisperModel

    model = WhisperModel(str(local.path), device="cpu", compute_type="int8", cpu_threads=1)
    assert model.model.is_multilingual and len(model.supported_languages) >= 99
    # faster-whisper lists large-v3's Cantonese for it too; base's tokenizer has no token for it
    assert language.known(model) == set(model.supported_languages) - {"yue"}
