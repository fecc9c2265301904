"""What both custom resources share: the pydantic base, metadata, conditions, names.

Contract: the field names (camelCase aliases), types and enums of `recall.resources` match the CRD
schemas in `crds/` exactly; `tests/unit/test_models_match_crds.py` walks both and fails on any
difference. Models are frozen: a state change produces a new object (`model_copy`).
`to_api()` dumps the Kubernetes form (aliases, no unset fields); `from_api()` validates a dict
read from the API server, ignoring metadata it does not model.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr
from pydantic.alias_generators import to_camel

GROUP = "recall.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
JOB_PLURAL = "transcriptionjobs"
BATCH_PLURAL = "batches"

LABEL_BATCH = "recall.dev/batch"
LABEL_ITEM = "recall.dev/item"
LABEL_INDEX = "recall.dev/index"
LABEL_SUSPENDED = "recall.dev/suspended"
LABEL_COMPONENT = "app.kubernetes.io/component"
MAX_NAME = 253

# Any Kubernetes object as the API server sends it (JSON), before or instead of a model.
RawObject = dict[str, Any]


class Model(BaseModel):
    """Base: camelCase aliases, frozen, unknown fields ignored (the API server may add some)."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="ignore"
    )

    def to_api(self) -> dict[str, Any]:
        """The Kubernetes JSON form: aliases, unset and None fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class Condition(Model):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str | None = None
    message: str | None = None
    last_transition_time: dt.datetime


def is_true(conditions: list[Condition], type_: str) -> bool:
    return any(c.type == type_ and c.status == "True" for c in conditions)


def set_condition(
    conditions: list[Condition],
    type_: str,
    status: Literal["True", "False", "Unknown"],
    reason: str,
    message: str,
    now: dt.datetime,
) -> list[Condition]:
    """Conditions with `type_` set; lastTransitionTime moves only when the status changes."""

    def made(since: dt.datetime) -> Condition:
        return Condition(
            type=type_, status=status, reason=reason, message=message, last_transition_time=since
        )

    out = [
        made(now if c.status != status else c.last_transition_time) if c.type == type_ else c
        for c in conditions
    ]
    return out if any(c.type == type_ for c in conditions) else [*out, made(now)]


class ObjectMeta(Model):
    """The metadata fields the project reads; everything else is ignored."""

    name: str
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: dt.datetime | None = None
    deletion_timestamp: dt.datetime | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class Resource(Model):
    """What both custom resources share: identity and the way they are read from the API."""

    api_version: str = API_VERSION
    kind: str
    metadata: ObjectMeta
    # The status as the API server sent it, fields this version does not know included: a
    # write that replaces the whole status starts from it and drops nothing it did not change.
    _raw_status: dict[str, Any] | None = PrivateAttr(default=None)

    @classmethod
    def from_api(cls, obj: dict[str, Any]) -> Self:
        resource = cls.model_validate(obj)
        status = obj.get("status")
        resource._raw_status = copy.deepcopy(status) if isinstance(status, dict) else None
        return resource

    @property
    def raw_status(self) -> dict[str, Any] | None:
        return self._raw_status

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or "default"

    @property
    def key(self) -> tuple[str, str]:
        """(namespace, name): how the operator and the worker index jobs and Batches."""
        return (self.namespace, self.name)

    @property
    def resource_version(self) -> str:
        rv = self.metadata.resource_version
        if rv is None:
            raise ValueError(f"{self.name}: object has no resourceVersion (not read from the API)")
        return rv


def object_name(base: str, suffix: str, limit: int = MAX_NAME) -> str:
    """`base-suffix`, shortened with a hash of `base` when it would exceed `limit`."""
    name = f"{base}-{suffix}"
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(base.encode()).hexdigest()[:10]
    keep = limit - len(suffix) - len(digest) - 2
    return f"{base[:keep].rstrip('-')}-{digest}-{suffix}"


def label_value(value: str) -> str:
    """A label value (max 63 characters): the value itself, or a prefix and a hash."""
    if len(value) <= 63:
        return value
    return f"{value[:52].rstrip('-.')}-{hashlib.sha256(value.encode()).hexdigest()[:10]}"
