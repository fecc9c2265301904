"""Container images written as OCI archives by hand, from files and root filesystems made here.

    layers = [tarball_layer(rootfs_tar), files_layer([File("usr/local/bin/x", path)])]
    write_archive(out, "registry.k8s.io/x:v1", layers, entrypoint=["/usr/local/bin/x"])

What `ctr images import` (and `kind load image-archive`) takes: an OCI image layout in a tar,
its index naming the image with `io.containerd.image.name`. Layers are gzipped tars (level 1:
the archives are cached, and a node unpacks them once). The output is reproducible: fixed
timestamps, owners and order, so an archive's digest changes only when its inputs do.
Not provided: more than one platform (linux/amd64 only), whiteouts (each layer only adds).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from recall_dev.docker import file_sha256

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
# The files every image FROM scratch needs here: who root and nobody are, and a /tmp.
PASSWD = "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/:/sbin/nologin\n"
GROUP = "root:x:0:\nnogroup:x:65534:\n"


@dataclass(frozen=True)
class File:
    """One entry of a layer: a file copied from `source`, or `text`, or a directory."""

    name: str
    source: Path | None = None
    text: str | None = None
    mode: int = 0o644
    directory: bool = False


@dataclass(frozen=True)
class Layer:
    """A gzipped layer tar and the digest of its uncompressed content (the diff ID)."""

    path: Path
    diff_id: str


def _gzip(raw: Path, out: Path) -> None:
    with (
        raw.open("rb") as src,
        out.open("wb") as dst,
        gzip.GzipFile(fileobj=dst, mode="wb", compresslevel=1, mtime=0) as gz,
    ):
        shutil.copyfileobj(src, gz, 1 << 20)


def _sha256(path: Path) -> str:
    return "sha256:" + file_sha256(path)


def files_layer(files: Sequence[File], out: Path) -> Layer:
    """A layer holding `files` (parent directories added), written to `out` (gzipped)."""
    raw = out.with_suffix(".raw")
    names: set[str] = set()
    with tarfile.open(raw, "w", format=tarfile.PAX_FORMAT) as tar:
        for entry in sorted(files, key=lambda f: f.name):
            parts = entry.name.strip("/").split("/")
            for depth in range(1, len(parts) + (1 if entry.directory else 0)):
                parent = "/".join(parts[:depth])
                if parent not in names:
                    names.add(parent)
                    info = tarfile.TarInfo(parent)
                    info.type = tarfile.DIRTYPE
                    info.mode = 0o1777 if parent == "tmp" else 0o755
                    tar.addfile(info)
            if entry.directory:
                continue
            data = entry.text.encode() if entry.text is not None else b""
            info = tarfile.TarInfo("/".join(parts))
            info.mode = entry.mode
            if entry.source is not None:
                info.size = entry.source.stat().st_size
                with entry.source.open("rb") as f:
                    tar.addfile(info, f)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    diff_id = _sha256(raw)
    _gzip(raw, out)
    raw.unlink()
    return Layer(out, diff_id)


def tarball_layer(rootfs: Path, out: Path) -> Layer:
    """A layer from an uncompressed root filesystem tarball, gzipped to `out`."""
    diff_id = _sha256(rootfs)
    _gzip(rootfs, out)
    return Layer(out, diff_id)


def scratch_files() -> list[File]:
    """/etc/passwd, /etc/group and /tmp: what a static binary's image needs besides itself."""
    return [
        File("etc/passwd", text=PASSWD),
        File("etc/group", text=GROUP),
        File("tmp", directory=True),
    ]


def _add_blob(tar: tarfile.TarFile, source: Path | bytes) -> tuple[str, int]:
    if isinstance(source, bytes):
        digest, size = "sha256:" + hashlib.sha256(source).hexdigest(), len(source)
    else:
        digest, size = _sha256(source), source.stat().st_size
    info = tarfile.TarInfo(f"blobs/sha256/{digest.removeprefix('sha256:')}")
    info.size = size
    if isinstance(source, bytes):
        tar.addfile(info, io.BytesIO(source))
    else:
        with source.open("rb") as f:
            tar.addfile(info, f)
    return digest, size


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def write_archive(
    out: Path,
    ref: str,
    layers: Sequence[Layer],
    *,
    entrypoint: Sequence[str] = (),
    env: Sequence[str] = ("PATH=/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin",),
    user: str = "",
) -> Path:
    """The image `ref` (its layers in order, this config) as an OCI archive at `out`."""
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": list(entrypoint) or None, "Env": list(env), "User": user},
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
    }
    partial = out.with_suffix(".partial")
    with tarfile.open(partial, "w") as tar:
        described = []
        for layer in layers:
            digest, size = _add_blob(tar, layer.path)
            described.append({"mediaType": OCI_LAYER, "digest": digest, "size": size})
        config_digest, config_size = _add_blob(tar, _json(config))
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": config_size},
            "layers": described,
        }
        manifest_digest, manifest_size = _add_blob(tar, _json(manifest))
        index = {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": OCI_MANIFEST,
                    "digest": manifest_digest,
                    "size": manifest_size,
                    "annotations": {
                        "io.containerd.image.name": ref,
                        "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[1],
                    },
                    "platform": {"architecture": "amd64", "os": "linux"},
                }
            ],
        }
        for name, content in (
            ("oci-layout", {"imageLayoutVersion": "1.0.0"}),
            ("index.json", index),
        ):
            data = _json(content)
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    partial.rename(out)
    return out
