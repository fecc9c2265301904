"""Images for the local node, made here and imported into its containerd; none is pulled.

- The pause image (the pod sandbox): the static `pause` binary that hack/k8s-tools/build.sh
  builds from hack/node/pause, alone in one layer — an image FROM scratch — written as an OCI
  archive by `pause_archive()`. The archive is byte-for-byte reproducible from the binary (fixed
  timestamps, owners and order), so its digest only changes when the binary does.
- The project's image: `docker save` of the image built from the Dockerfile (recall_dev.image).

`import_archive()` loads an archive into the node's containerd in the CRI namespace (k8s.io),
where the kubelet finds images with `imagePullPolicy: Never`.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path

PAUSE_IMAGE = "recall.local/pause:1"
CRI_NAMESPACE = "k8s.io"


def _blob(tar: tarfile.TarFile, data: bytes) -> tuple[str, int]:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size = len(data)
    info.mtime = 0
    tar.addfile(info, io.BytesIO(data))
    return f"sha256:{digest}", len(data)


def _layer(binary: Path) -> tuple[bytes, str]:
    """A gzipped tar holding /pause; returns (compressed bytes, digest of the uncompressed tar)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        data = binary.read_bytes()
        info = tarfile.TarInfo("pause")
        info.size = len(data)
        info.mode = 0o755
        info.mtime = 0
        tar.addfile(info, io.BytesIO(data))
    uncompressed = raw.getvalue()
    packed = io.BytesIO()
    with gzip.GzipFile(fileobj=packed, mode="wb", mtime=0) as gz:
        gz.write(uncompressed)
    return packed.getvalue(), "sha256:" + hashlib.sha256(uncompressed).hexdigest()


def pause_archive(binary: Path, out: Path, ref: str = PAUSE_IMAGE) -> Path:
    """Write the pause image (one layer: /pause, entrypoint /pause) as an OCI archive."""
    layer, diff_id = _layer(binary)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }
    with tarfile.open(out, "w") as tar:
        layer_digest, layer_size = _blob(tar, layer)
        config_digest, config_size = _blob(tar, json.dumps(config, sort_keys=True).encode())
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": config_size,
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": layer_digest,
                    "size": layer_size,
                }
            ],
        }
        manifest_digest, manifest_size = _blob(tar, json.dumps(manifest, sort_keys=True).encode())
        index = {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
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
            data = json.dumps(content, sort_keys=True).encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    return out


def import_archive(address: Path, archive: Path) -> None:
    """Import an image archive (OCI or `docker save`) into containerd's CRI namespace."""
    subprocess.run(
        ["ctr", "--address", str(address), "--namespace", CRI_NAMESPACE, "images", "import",
         str(archive)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip


def image_refs(address: Path) -> set[str]:
    """The image names in containerd's CRI namespace."""
    out = subprocess.run(
        ["ctr", "--address", str(address), "--namespace", CRI_NAMESPACE, "images", "ls", "-q"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return set(out.split())
