"""A refusal says what is checked: a CEL rule's message names the suffix the rule tests."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from recall_dev.twin.rules import job_status_rules

ROOT = Path(__file__).resolve().parents[3]
ENDS_WITH = re.compile(
    r"endsWith\('(?P<head>[^']*)' \+ self\.(?P<field>\w+) \+ '(?P<tail>[^']*)'\)"
)


def validations(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield from node.get("x-kubernetes-validations", [])
        for value in node.values():
            yield from validations(value)
    elif isinstance(node, list):
        for value in node:
            yield from validations(value)


def test_crd_suffix_rules__the_message_names_the_suffix_the_rule_checks() -> None:
    checked = 0
    for path in [
        *(ROOT / "crds").glob("*.yaml"),
        *(ROOT / "charts/recall/files/crds").glob("*.yaml"),
    ]:
        for rule in validations(yaml.safe_load(path.read_text())):
            m = ENDS_WITH.search(rule["rule"])
            if m is None:
                continue
            checked += 1
            suffix = f"{m['head']}<result.{m['field']}>{m['tail']}"
            message = " ".join(rule["message"].split())
            assert f"end with {suffix}" in message, (path.name, message)
            # Nothing the rule does not check is promised: the text before the suffix ends.
            assert re.search(rf"\s{re.escape(suffix)}", message), (path.name, message)
    assert checked >= 2  # the repository's CRD and the chart's copy


def test_memory_store__refuses_a_foreign_key_with_the_crd_message() -> None:
    crd = yaml.safe_load((ROOT / "crds/transcriptionjobs.recall.dev.yaml").read_text())
    messages = [" ".join(r["message"].split()) for r in validations(crd) if "endsWith" in r["rule"]]
    lease = {"holder": "w", "token": "t1", "acquireTime": "2026-01-01T00:00:00Z"}
    old = {"phase": "Leased", "lease": lease, "attempts": 1, "fence": "t1/1"}
    result = {"token": "t1", "attempt": 1, "transcript": "x/a1-t2/transcript.json"}
    new = {"phase": "Succeeded", "result": result, "attempts": 1, "fence": "t1/2"}
    assert messages and messages[0] in job_status_rules(old, new, {"maxAttempts": 3})
