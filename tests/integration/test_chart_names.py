"""The chart's names and egress stay within what Kubernetes and the NetworkPolicy mean.

- Every namespaced object's name fits in 63 characters (a Service's name is a DNS label) at
  the longest fullnameOverride the schema allows and at the longest release name helm allows,
  with every suffixed object rendered; names that fit untouched keep their name, and
  `recall doctor` computes the same prefix (`recall.cli.checks.fullname`).
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

# Every object with a suffix after the prefix: the NetworkPolicies, PDBs, a pool (whose name
# the chart bounds on its own), the KEDA mode's -operator-workload Service.
EVERY_SUFFIX: dict[str, Any] = {
    "networkPolicy": {"enabled": True},
    "operator": {"replicas": 2, "podDisruptionBudget": {"enabled": True}},
    "worker": {"podDisruptionBudget": {"enabled": True}, "autoscaling": {"mode": "keda"}},
    "pools": [{"name": "g"}],
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
    [("rc", "o" * 52), ("r" * 53, None), ("r" * 38, None)],
    ids=["longest-fullnameOverride", "longest-release-name", "release-name-that-fits"],
)
def test_template__every_name_fits_in_63_characters(
    tools: Tools, tmp_path: Path, release: str, override: str | None
) -> None:
    values = {**EVERY_SUFFIX, "fullnameOverride": override} if override else EVERY_SUFFIX
    docs = render(tools, tmp_path, release, values)
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("Service", f"{fullname(release, override)}-operator-workload") in names
    # Cluster-scoped names (<namespace>-<fullname>-...) are DNS subdomains: 253 characters.
    too_long = [
        (d["kind"], d["metadata"]["name"])
        for d in docs
        if len(d["metadata"]["name"]) > (63 if "namespace" in d["metadata"] else 253)
    ]
    assert not too_long
    prefix = find(docs, "Deployment", "-operator")["metadata"]["name"].removesuffix("-operator")
    assert prefix == fullname(release, override)
    if len(f"{release}-recall") <= 45 and not override:
        assert prefix == f"{release}-recall", "a name that fits is not cut"


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
