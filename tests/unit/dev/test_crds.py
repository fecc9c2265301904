"""The fields of a CRD's schema (recall_dev.crds.schema_fields), what the upgrade test compares
the served CRDs by, and the CRD policy of docs/releases.md held against the previous release:
within v1alpha1 a release adds fields and removes none."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from recall_dev.crds import load_crds, schema_fields
from recall_dev.release import changelog_entries

ROOT = Path(__file__).resolve().parents[3]


def test_schema_fields__properties_array_items_and_map_values_of_every_version() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "items": {
                        "type": "array",
                        "items": {"type": "object", "properties": {"key": {"type": "string"}}},
                    },
                    "labels": {
                        "type": "object",
                        "additionalProperties": {
                            "type": "object",
                            "properties": {"value": {"type": "string"}},
                        },
                    },
                },
            }
        },
    }
    crd = {
        "spec": {
            "versions": [
                {"name": "v1alpha1", "schema": {"openAPIV3Schema": schema}},
                {"name": "v1beta1", "schema": {"openAPIV3Schema": {"type": "object"}}},
            ]
        }
    }
    assert schema_fields(crd) == {
        "v1alpha1.spec",
        "v1alpha1.spec.items",
        "v1alpha1.spec.items[].key",
        "v1alpha1.spec.labels",
        "v1alpha1.spec.labels{}.value",
    }


def test_crds__this_release_keeps_every_field_of_the_previous_one_and_adds_checkpoint_seconds() -> (
    None
):
    _, (_, commit) = changelog_entries(ROOT)[:2]
    current = {d["metadata"]["name"]: schema_fields(d) for d in load_crds(ROOT / "crds")}
    previous = {}
    for name, fields in current.items():
        text = subprocess.run(
            ["git", "show", f"{commit}:crds/{name}.yaml"],
            cwd=ROOT, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        previous[name] = schema_fields(yaml.safe_load(text))
        assert previous[name] <= fields, f"{name} lost {sorted(previous[name] - fields)}"
    # what the upgrade test looks for in the served schema after the upgrade, and not after
    # the rollback
    job, field = "transcriptionjobs.recall.dev", "v1alpha1.spec.checkpointSeconds"
    assert field in current[job] and field not in previous[job]
