"""The doctor's `crds` check (what it checks: `recall.cli.doctor`).

The verdict on one CRD (`crd_problem`) is pure: what keeps this CLI from working with it, and
the fix, judged by its release label when it has one (which of the two is newer says whether to
upgrade the chart or the CLI), else by its fields (an older CRD lacks some, a newer has more).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from recall import __version__
from recall.cli.checks import Check, fail, field_paths, ok

if TYPE_CHECKING:
    from recall.kube.install import InstallReader

CRDS = ("transcriptionjobs.recall.dev", "batches.recall.dev")
RELEASE_LABEL = "app.kubernetes.io/version"  # on each CRD: the release that made it


def _spec_and_status(paths: Iterable[str]) -> set[str]:
    return {p for p in paths if p.startswith((".spec", ".status"))}


def _some(paths: list[str]) -> str:
    return ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")


def release_key(release: str) -> tuple[int, ...]:
    """The numbers of a release (`0.2.0`, `v0.3.0-rc.1` → (0, 2, 0), (0, 3, 0)), to order two."""
    return tuple(int(n) for n in re.findall(r"\d+", release.lstrip("v").split("+")[0])[:3])


def release_problem(installed: str, cli: str) -> tuple[str, str] | None:
    """What a CRD's release label (`app.kubernetes.io/version`) says against this CLI's release,
    and the fix: which one is newer, and what to upgrade; None when they are the same."""
    if installed == cli:
        return None
    what = f"is of release {installed}, this CLI of {cli}"
    if release_key(installed) < release_key(cli):
        return f"{what}: the CRDs are older", (
            f"upgrade the chart and its CRDs to {cli} (helm upgrade; kubectl apply -f crds/ "
            "where crds.install=false)"
        )
    if release_key(installed) > release_key(cli):
        return f"{what}: the CLI is older", (
            f"upgrade the recall CLI to {installed} (pip install recall-operator=={installed}; "
            "helm test runs that release's image)"
        )
    return what, "use the CLI and the chart of one release"


def crd_problem(
    crd: dict[str, Any], model: type[Any], version: str, release: str
) -> tuple[str, str] | None:
    """What keeps this CLI (of `release`, for API `version`) from working with an installed
    CRD, and the fix; None if nothing. A CRD without a release label is judged by its fields."""
    conditions = {c.get("type"): c for c in (crd.get("status") or {}).get("conditions") or []}
    established = conditions.get("Established") or {}
    if established.get("status") != "True":
        why = established.get("message") or "no condition yet"
        return f"is not Established ({why})", f"kubectl describe crd {crd['metadata']['name']}"
    served = {v["name"]: v for v in crd["spec"]["versions"] if v.get("served")}
    if version not in served:
        names = ", ".join(sorted(served)) or "nothing"
        return f"serves {names}, not {version}", "install the CRDs of this recall's release"
    label = ((crd.get("metadata") or {}).get("labels") or {}).get(RELEASE_LABEL)
    if label and (problem := release_problem(str(label), release)):
        return problem
    installed = _spec_and_status(field_paths(served[version]["schema"]["openAPIV3Schema"], {}))
    schema = model.model_json_schema(by_alias=True)
    mine = _spec_and_status(field_paths(schema, schema.get("$defs", {})))
    if older := sorted(mine - installed):
        return f"lacks {_some(older)}: older than this CLI", (
            "upgrade the CRDs to this release (helm upgrade, or kubectl apply -f crds/)"
        )
    if newer := sorted(installed - mine):
        return f"has {_some(newer)}: newer than this CLI", (
            "use the recall CLI and image of the release that installed the CRDs"
        )
    return None


def check_crds(reader: InstallReader, release: str = __version__) -> Check:
    from recall.resources import VERSION, Batch, TranscriptionJob

    for name, model in zip(CRDS, (TranscriptionJob, Batch), strict=True):
        crd = reader.crd(name)
        if crd is None:
            fix = "helm upgrade --install with crds.install=true, or kubectl apply -f crds/"
            return fail("crds", f"CRD {name} is not installed", fix)
        problem = crd_problem(crd, model, VERSION, release)
        if problem is not None:
            return fail("crds", f"CRD {name} {problem[0]}", problem[1])
    return ok(
        "crds",
        f"{' and '.join(CRDS)} established, of release {release} as this CLI, serving "
        f"{VERSION} with its fields",
    )
