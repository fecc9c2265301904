"""The chart's names and egress stay within what Kubernetes and the NetworkPolicy mean.

- Every Service's name fits in 63 characters (a DNS label) and every other name in 253 at the
  longest fullnameOverride the schema allows and at the longest release name helm allows, with
  every suffixed object rendered; a Service's suffix is kept and its prefix cut, every other
  object keeps the chart's prefix (an upgrade renames nothing), and `recall doctor` computes
  the same prefix (`recall.cli.checks.fullname`).
- networkPolicy.apiServer.ports cannot be empty: an egress rule without ports (and without
  peers) would allow all egress.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from recall.cli.checks import fullname
from tests.integration.test_chart import CHART, Tools, find, tools, values_file

pytestmark = pytest.mark.integration
__all__ = ["tools"]  # the fixture, shared with test_chart.py

# Every object with a suffix after the prefix: the NetworkPolicies, PDBs, the KEDA mode's
# -operator-workload Service (a pool's names the chart bounds on its own: `recall.validatePools`).
EVERY_SUFFIX: dict[str, Any] = {
    "networkPolicy": {"enabled": True},
    "operator": {"replicas": 2, "podDisruptionBudget": {"enabled": True}},
    "worker": {"podDisruptionBudget": {"enabled": True}, "autoscaling": {"mode": "keda"}},
}


def render(tools: Tools, tmp: Path, release: str, values: dict[str, Any]) -> list[dict[str, Any]]:
    path = values_file(tmp, values)
    out = tools.ok(
        "helm", "template", release, str(CHART), "--namespace", "recall", "--skip-tests",
        "--api-versions", "keda.sh/v1alpha1", "--values", str(path),
    )  # fmt: skip
    return [d for d in yaml.safe_load_all(out) if d]


@pytest.mark.parametrize(
    ("release", "override"),
    [("rc", "o" * 52), ("r" * 53, None), ("r" * 45, None)],
    ids=["longest-fullnameOverride", "longest-release-name", "release-name-that-fits"],
)
def test_template__every_name_fits_in_63_characters(
    tools: Tools, tmp_path: Path, release: str, override: str | None
) -> None:
    values = {**EVERY_SUFFIX, "fullnameOverride": override} if override else EVERY_SUFFIX
    docs = render(tools, tmp_path, release, values)
    prefix = fullname(release, override)
    services = {d["metadata"]["name"] for d in docs if d["kind"] == "Service"}
    assert services, "the Services rendered"
    assert all(len(n) <= 63 for n in services), sorted(services)
    workload = next(n for n in services if n.endswith("-operator-workload"))
    assert prefix.startswith(workload.removesuffix("-operator-workload"))
    assert all(len(d["metadata"]["name"]) <= 253 for d in docs)
    assert find(docs, "Deployment", "-operator")["metadata"]["name"] == f"{prefix}-operator"
    if len(f"{release}-recall") <= 52 and not override:
        assert prefix == f"{release}-recall", "a name that fits is not cut"
    objects = yaml.safe_dump(docs)
    assert f"http://{workload}." in objects, "the KEDA trigger's URL names the Service"


def test_schema__refuses_an_empty_list_of_api_server_ports(tools: Tools) -> None:
    out = tools.run(
        "helm", "template", "rc", str(CHART), "--set", "networkPolicy.enabled=true",
        "--set-json", "networkPolicy.apiServer.ports=[]",
    )  # fmt: skip
    assert out.returncode != 0, "an empty port list was accepted"
    assert "at '/networkPolicy/apiServer/ports': minItems" in out.stderr, out.stderr
    skipped = tools.run(
        "helm", "template", "rc", str(CHART), "--set", "networkPolicy.enabled=true",
        "--set-json", "networkPolicy.apiServer.ports=[]", "--skip-schema-validation",
    )  # fmt: skip
    assert skipped.returncode != 0 and "would allow all egress" in skipped.stderr, skipped.stderr
