"""KEDA's ScaledObject CRD, from KEDA's own Go module, for checking the chart's KEDA mode.

    path = scaledobject_crd()     # ~/.cache/recall/keda-v2.21.0/keda.sh_scaledobjects.yaml

KEDA cannot run here (it needs its operator, its metrics server and an HPA controller), so the
chart's ScaledObject is checked against the schema KEDA itself ships: `go mod download` fetches
the module `github.com/kedacore/keda/v2` at `VERSION` (source only, nothing is built) and its
`config/crd/bases/keda.sh_scaledobjects.yaml` is copied into the project's cache
(`RECALL_CACHE_DIR`, else `$XDG_CACHE_HOME/recall` or `~/.cache/recall`). Later calls read the
cache and need no network. Raises `KedaUnavailable` with the reason when it cannot.

What the schema does not check: a trigger's `metadata` (a map of strings to KEDA's scalers,
validated by its admission webhook at run time); the tests check the endpoint it names.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

MODULE = "github.com/kedacore/keda/v2"
VERSION = "v2.21.0"
CRD = "config/crd/bases/keda.sh_scaledobjects.yaml"


class KedaUnavailable(RuntimeError):
    """KEDA's CRD could not be fetched (no Go toolchain, no module proxy)."""


def cache_dir() -> Path:
    root = os.environ.get("RECALL_CACHE_DIR")
    if root:
        return Path(root) / f"keda-{VERSION}"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "recall" / f"keda-{VERSION}"


def scaledobject_crd() -> Path:
    """The ScaledObject CRD of KEDA `VERSION`, from the cache or its Go module."""
    cached = cache_dir() / Path(CRD).name
    if cached.exists():
        return cached
    go = shutil.which("go")
    if go is None:
        raise KedaUnavailable("no `go` on PATH to download KEDA's module for its CRD")
    with tempfile.TemporaryDirectory(prefix="recall-keda-") as work:
        done = subprocess.run(
            [go, "mod", "download", "-json", f"{MODULE}@{VERSION}"],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "GOFLAGS": "-mod=mod"},
        )
    if done.returncode != 0:
        raise KedaUnavailable(f"go mod download {MODULE}@{VERSION}: {done.stderr.strip()[-500:]}")
    source = Path(json.loads(done.stdout)["Dir"]) / CRD
    if not source.exists():
        raise KedaUnavailable(f"{MODULE}@{VERSION} has no {CRD}")
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(".partial")
    shutil.copyfile(source, partial)
    partial.replace(cached)
    return cached
