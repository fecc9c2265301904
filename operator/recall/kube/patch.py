"""JSON merge patches (RFC 7386) as pure functions; a fenced write tells by
`apply_merge_patch` whether a patch it sent is already applied."""

from __future__ import annotations

import copy
from typing import Any


def merge_patch(old: Any, new: Any) -> Any:
    """The RFC 7386 merge patch that turns `old` into `new` (keys removed become null)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    patch: dict[str, Any] = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        if key not in old:
            patch[key] = value
        elif old[key] != value:
            patch[key] = merge_patch(old[key], value)
    return patch


def apply_merge_patch(doc: Any, patch: Any) -> Any:
    """`doc` with the RFC 7386 merge `patch` applied (neither argument is modified)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out: dict[str, Any] = copy.deepcopy(doc) if isinstance(doc, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = apply_merge_patch(out.get(key), value)
    return out
