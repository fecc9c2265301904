"""The pydantic models and the CRD schemas agree field by field: names, types, enums, and
every CRD field has a description (what `kubectl explain` prints)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from recall.resources import Batch, TranscriptionJob

CRDS = Path(__file__).resolve().parents[3] / "crds"


def crd_schema(filename: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / filename).read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def normalise_model(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """A pydantic JSON schema reduced to {type, enum, properties, items, additional}."""
    if "$ref" in schema:
        return normalise_model(defs[schema["$ref"].split("/")[-1]], defs)
    if "anyOf" in schema:
        options = [s for s in schema["anyOf"] if s.get("type") != "null"]
        assert len(options) == 1, schema
        return normalise_model(options[0], defs)
    if "const" in schema:
        return {"type": "string", "enum": [schema["const"]]}
    return reduced(schema, lambda inner: normalise_model(inner, defs))


def normalise_crd(schema: dict[str, Any]) -> dict[str, Any]:
    return reduced(schema, normalise_crd)


def reduced(
    schema: dict[str, Any], normalise: Callable[[dict[str, Any]], dict[str, Any]]
) -> dict[str, Any]:
    """A schema's type, enum and format, its properties, items and additional properties
    reduced by `normalise`."""
    out: dict[str, Any] = {"type": schema.get("type")}
    if "enum" in schema:
        out["enum"] = sorted(schema["enum"])
    if schema.get("format") == "date-time":
        out["format"] = "date-time"
    if out["type"] == "object":
        if "properties" in schema:
            out["properties"] = {k: normalise(v) for k, v in schema["properties"].items()}
        if isinstance(schema.get("additionalProperties"), dict):
            out["additional"] = normalise(schema["additionalProperties"])
    if out["type"] == "array":
        out["items"] = normalise(schema["items"])
    return out


def differences(model: dict[str, Any], crd: dict[str, Any], path: str = "") -> list[str]:
    diffs = []
    for key in ("type", "enum", "format"):
        if model.get(key) != crd.get(key):
            diffs.append(f"{path or '.'}: {key} model={model.get(key)} crd={crd.get(key)}")
    mp, cp = model.get("properties"), crd.get("properties")
    if mp is not None or cp is not None:
        mp, cp = mp or {}, cp or {}
        for name in sorted(mp.keys() - cp.keys()):
            diffs.append(f"{path}.{name}: in the model, not in the CRD")
        for name in sorted(cp.keys() - mp.keys()):
            diffs.append(f"{path}.{name}: in the CRD, not in the model")
        for name in sorted(mp.keys() & cp.keys()):
            diffs += differences(mp[name], cp[name], f"{path}.{name}")
    if "items" in model or "items" in crd:
        diffs += differences(model.get("items", {}), crd.get("items", {}), f"{path}[]")
    if "additional" in model or "additional" in crd:
        diffs += differences(model.get("additional", {}), crd.get("additional", {}), f"{path}{{}}")
    return diffs


def missing_descriptions(schema: dict[str, Any], path: str = "") -> list[str]:
    out = []
    for name, prop in schema.get("properties", {}).items():
        here = f"{path}.{name}"
        if name != "metadata" and not prop.get("description"):
            out.append(here)
        out += missing_descriptions(prop, here)
    if "items" in schema:
        out += missing_descriptions(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        out += missing_descriptions(schema["additionalProperties"], f"{path}{{}}")
    return out


CASES = [
    (TranscriptionJob, "transcriptionjobs.recall.dev.yaml"),
    (Batch, "batches.recall.dev.yaml"),
]


@pytest.mark.parametrize(("model", "filename"), CASES)
def test_model_and_crd_agree_field_by_field(model: type[BaseModel], filename: str) -> None:
    js = model.model_json_schema(by_alias=True)
    normal_model = normalise_model(js, js.get("$defs", {}))
    normal_crd = normalise_crd(crd_schema(filename))
    # metadata is Kubernetes' ObjectMeta: the CRD leaves it to the API server.
    normal_model["properties"].pop("metadata")
    normal_crd["properties"].pop("metadata")
    assert differences(normal_model, normal_crd) == []


@pytest.mark.parametrize("filename", [c[1] for c in CASES])
def test_every_crd_field_has_a_description(filename: str) -> None:
    assert missing_descriptions(crd_schema(filename)) == []


def test_differences__reports_a_missing_field() -> None:
    model = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}
    crd = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert differences(model, crd) == [
        ".b: in the model, not in the CRD",
        ".a: type model=string crd=integer",
    ]
