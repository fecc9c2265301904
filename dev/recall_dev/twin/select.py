"""JSON patches (RFC 6902) and kubectl-style selectors over raw objects, for the twin.

`apply_json_patch(doc, ops)` applies a JSON patch. `matches_fields` and `matches_labels`
evaluate the field and label selectors the project uses (equality, inequality, existence,
`in` / `notin`) against a raw object, as the API server does for lists and watches; `selected`
and `selected_event` say what a list or watch of a selection returns.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from recall.kube.base import Selector


def field_value(obj: dict[str, Any], path: str) -> str | None:
    """The string form of a dotted field (`status.phase`) as a field selector compares it."""
    node: Any = obj
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    if node is None:
        return None
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


_IN = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split(selector: str) -> list[str]:
    """Split on commas that are not inside `in (...)` lists."""
    parts, depth, current = [], 0, ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def _term(value: str | None, term: str) -> bool:
    m = _IN.match(term)
    if m:
        values = {v.strip() for v in m.group(3).split(",") if v.strip()}
        inside = value is not None and value in values
        return inside if m.group(2) == "in" else not inside
    for op in ("!=", "==", "="):
        if op in term:
            _, _, expected = term.partition(op)
            return (value == expected.strip()) != (op == "!=")
    return value is not None  # existence


def _key(term: str) -> str:
    m = _IN.match(term)
    if m:
        return m.group(1)
    return re.split(r"!=|==|=", term.lstrip("!"), maxsplit=1)[0].strip()


def matches_labels(labels: dict[str, str], selector: str | None) -> bool:
    for term in _split(selector or ""):
        if term.startswith("!"):
            if term[1:].strip() in labels:
                return False
            continue
        if not _term(labels.get(_key(term)), term):
            return False
    return True


def matches_fields(obj: dict[str, Any], selector: str | None) -> bool:
    return all(_term(field_value(obj, _key(term)), term) for term in _split(selector or ""))


def apply_json_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """`doc` with the RFC 6902 JSON patch `ops` applied (add, replace, remove, test; `doc` is
    not modified). A failed `test` or a missing path raises ValueError."""
    out = copy.deepcopy(doc)
    for op in ops:
        *parents, last = [
            p.replace("~1", "/").replace("~0", "~") for p in str(op["path"]).split("/")[1:]
        ]
        node = out
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        key: Any = (len(node) if last == "-" else int(last)) if isinstance(node, list) else last
        kind = op["op"]
        if kind == "test":
            if node[key] != op["value"]:
                raise ValueError(f"test failed at {op['path']}")
        elif kind == "remove":
            del node[key]
        elif kind == "add" and isinstance(node, list):
            node.insert(key, copy.deepcopy(op["value"]))
        elif kind in ("add", "replace"):
            if kind == "replace" and (key not in node if isinstance(node, dict) else False):
                raise ValueError(f"nothing to replace at {op['path']}")
            node[key] = copy.deepcopy(op["value"])
        else:
            raise ValueError(f"unsupported JSON patch operation {kind!r}")
    return out


def selected(obj: dict[str, Any], selector: Selector) -> bool:
    """Whether `obj` is in the selection of a list or watch."""
    labels = obj.get("metadata", {}).get("labels") or {}
    return matches_fields(obj, selector.fields) and matches_labels(labels, selector.labels)


def selected_event(
    type_: str, new: dict[str, Any], old: dict[str, Any] | None, selector: Selector
) -> str | None:
    """What a watch of the selection sends for a change (`old` → `new`): an object leaving
    the selection arrives DELETED, one entering it ADDED, as the API server's watch cache does;
    None when the change is outside it."""
    now_in = type_ != "DELETED" and selected(new, selector)
    was_in = old is not None and selected(old, selector)
    if type_ == "DELETED":
        return "DELETED" if was_in else None
    if now_in and not was_in:
        return "ADDED"
    if was_in and not now_in:
        return "DELETED"
    return "MODIFIED" if now_in else None
