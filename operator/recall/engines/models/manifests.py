"""Model manifests (`SHA256SUMS`): read, written in canonical form, digested, and checked
against a directory (pure but for hashing files; `recall.engines.models` states the
contract)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from recall.resources.errors import JobFailure

MANIFEST = "SHA256SUMS"
_LINE = re.compile(r"^([0-9a-fA-F]{64}) [ *](.+)$")


def parse_manifest(raw: bytes, where: str) -> dict[str, str]:
    """name -> sha256 of a `SHA256SUMS`; raises `ModelInvalid` for anything else."""
    entries: dict[str, str] = {}
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        text = ""
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _LINE.match(line.strip())
        name = match.group(2).strip() if match else ""
        if name == MANIFEST:
            continue  # `sha256sum * > SHA256SUMS` run a second time lists the old one
        if match is None or "/" in name or name in (".", "..") or name.startswith("."):
            raise JobFailure(
                "ModelInvalid",
                f"{where}: {MANIFEST} line {line[:80]!r} is not '<sha256>  <file name>'",
                permanent=True,
            )
        entries[name] = match.group(1).lower()
    if not entries:
        raise JobFailure("ModelInvalid", f"{where}: {MANIFEST} names no file", permanent=True)
    return entries


def canonical(entries: dict[str, str]) -> bytes:
    return "".join(f"{entries[n]}  {n}\n" for n in sorted(entries)).encode()


def digest_of(entries: dict[str, str]) -> str:
    return "sha256:" + hashlib.sha256(canonical(entries)).hexdigest()


def file_sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def manifest(directory: Path) -> bytes:
    """The canonical `SHA256SUMS` of the regular files of `directory` (not hidden ones)."""
    entries = {
        p.name: file_sha256(p)
        for p in sorted(directory.iterdir())
        if p.is_file() and p.name != MANIFEST and not p.name.startswith(".")
    }
    return canonical(entries)


def verify(directory: Path, entries: dict[str, str], where: str) -> None:
    """Every file `entries` names is in `directory` with its sha256, else `ModelCorrupt` or
    `ModelNotFound`."""
    for name, expected in sorted(entries.items()):
        path = directory / name
        if not path.is_file():
            raise JobFailure(
                "ModelNotFound", f"{where}: {name} (named in {MANIFEST}) is missing", permanent=True
            )
        got = file_sha256(path)
        if got != expected:
            raise corrupt(where, name, expected, got)


def corrupt(where: str, name: str, expected: str, got: str) -> JobFailure:
    return JobFailure(
        "ModelCorrupt",
        f"{where}: {name} has sha256 {got[:16]}…, {MANIFEST} says {expected[:16]}…",
        permanent=True,
    )
