"""What the API server checks and fills in that the in-memory twin can express, as pure functions.

The CRDs' CEL rules mirror those in `crds/`, so that unit tests running on the twin meet the
same refusals a real API server gives; the real API server stays the judge (the integration
tests run the same careless writes against it). Each rule function returns the messages of the
rules a write breaks, empty when it is allowed; `refusal` says, for any resource, why a write
is refused, and `created` what a created object looks like once stored (the CRD's defaults, a
generated name). Objects are raw API dicts (camelCase), as stored.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from recall.kube.base import RawObject
from recall.kube.verbs import BATCHES, CONFIG_MAPS, EVENTS, JOBS, Resource

CONFIG_MAP_LIMIT = 1024 * 1024
JOB_SPEC_DEFAULTS = {
    "leaseDurationSeconds": 120,
    "maxAttempts": 5,
    "maxReleases": 10,
    "priority": 0,
}
TERMINAL = ("Succeeded", "Failed", "Cancelled")
COUNTERS = ("attempts", "expiredLeases", "failures", "releases")
# What no worker of an English-only pool can do: the operator fails such a job unleased (reject)
REJECT_REASONS = ("LanguageDetectionUnsupported", "TranslationUnsupported")
TOKEN = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class Change:
    """One status write: the status before and after, and the job's spec."""

    old: dict[str, Any]
    new: dict[str, Any]
    spec: dict[str, Any]

    @property
    def phase(self) -> str:
        return str(self.new.get("phase") or "Queued")

    @property
    def old_phase(self) -> str:
        return str(self.old.get("phase") or "Queued")

    @property
    def lease(self) -> Any:
        return self.new.get("lease")

    @property
    def old_lease(self) -> Any:
        return self.old.get("lease")

    @property
    def claim(self) -> bool:
        return self.lease is not None and self.old_lease is None

    @property
    def ends_lease(self) -> bool:
        return self.old_lease is not None and self.lease is None

    def count(self, name: str, old: bool = False) -> int:
        return int((self.old if old else self.new).get(name) or 0)

    def budget(self) -> int:
        spent = min(self.count("releases"), int(self.spec.get("maxReleases", 10)))
        return int(self.spec.get("maxAttempts", 5)) + spent


Rule = Callable[[Change], Iterator[str]]


def lease_shape(c: Change) -> Iterator[str]:
    if (c.lease is not None) != (c.phase == "Leased"):
        yield "a lease exists exactly while the job is Leased"
    if c.lease is not None:
        if not TOKEN.fullmatch(str(c.lease.get("token") or "")):
            yield "status.lease.token is 32 hexadecimal digits"
        if not str(c.new.get("fence") or "").startswith(f"{c.lease.get('token')}/"):
            yield "a Leased job's status.fence names its own lease token"
    if c.phase == "Leased" and c.count("attempts") < 1:
        yield "a Leased job has at least one attempt"


def fenced(c: Change) -> Iterator[str]:
    if c.old_lease is not None and c.new != c.old:
        fence = str(c.new.get("fence") or "")
        if not fence.startswith(f"{c.old_lease['token']}/") or fence == c.old.get("fence"):
            yield (
                "the job is leased: a write must present the lease token in status.fence "
                "as '<status.lease.token>/<new suffix>'"
            )
    kept = ("token", "holder", "acquireTime")
    if (
        c.lease is not None
        and c.old_lease is not None
        and any(c.lease.get(f) != c.old_lease.get(f) for f in kept)
    ):
        yield "a lease is never replaced in place"


def counters(c: Change) -> Iterator[str]:
    if c.claim and c.count("attempts") != c.count("attempts", old=True) + 1:
        yield "a new lease takes exactly one new attempt"
    if c.count("attempts") != c.count("attempts", old=True) and not c.claim:
        yield "status.attempts changes only with a claim"
    for name in COUNTERS:
        if name in c.old and name not in c.new:
            yield f"status.{name} cannot be removed"
        elif c.count(name) < c.count(name, old=True):
            yield f"status.{name} never decreases"
    grew = c.count("releases") - c.count("releases", old=True)
    if grew and not (grew == 1 and c.old_lease is not None and c.phase == "Queued"):
        yield "status.releases grows by one, with a release"
    grew = c.count("expiredLeases") - c.count("expiredLeases", old=True)
    if grew and not (grew == 1 and c.ends_lease):
        yield "status.expiredLeases grows by one, when a lease ends"
    if c.count("attempts") > c.budget():
        yield "status.attempts cannot exceed spec.maxAttempts plus the free releases"


def result(c: Change) -> Iterator[str]:
    new, old = c.new.get("result"), c.old.get("result")
    if c.phase == "Succeeded" and new is None:
        yield "a Succeeded job carries status.result"
    if new is not None and c.phase != "Succeeded":
        yield "only a Succeeded job has a result"
    if old is not None and new != old:
        yield "the result never changes"
    if new is not None and not str(new.get("transcript") or "").endswith(
        f"-{new.get('token')}/transcript.json"
    ):
        yield (
            "status.result.transcript must be the transcript the completing lease wrote: its "
            "key must end with -<result.token>/transcript.json"
        )
    if c.phase == "Succeeded" and c.old_phase != "Succeeded":
        lease = c.old_lease
        if (
            lease is None
            or new is None
            or new.get("token") != lease.get("token")
            or new.get("attempt") != c.count("attempts", old=True)
        ):
            yield (
                "Succeeded is reached only from Leased, with the lease's token and attempt "
                "in status.result"
            )


def queued_only(c: Change) -> Iterator[str]:
    if c.claim and c.old.get("backoffSeconds") is not None:
        yield "a job in backoff is not claimed until the operator ends the backoff"
    backoff = c.new.get("backoffSeconds")
    if backoff is not None and backoff != c.old.get("backoffSeconds") and not c.ends_lease:
        yield "status.backoffSeconds is set only by the write that ends a lease (fail)"
    error = c.new.get("lastError") or {}
    rejected = error.get("permanent") is True and error.get("reason") in REJECT_REASONS
    if (
        c.old_phase == "Queued"
        and c.phase == "Failed"
        and c.count("attempts") < c.budget()
        and not rejected
    ):
        yield "a Queued job fails only when its attempts are spent (or is rejected)"
    if c.new.get("offer") is not None and c.phase != "Queued":
        yield "only a Queued job is offered"
    if backoff is not None and c.phase != "Queued":
        yield "only a Queued job waits in backoff"


def published(c: Change) -> Iterator[str]:
    if c.new.get("published") is not None and c.phase != "Succeeded":
        yield "status.published exists only on a Succeeded job"


RULES: list[Rule] = [lease_shape, fenced, counters, result, queued_only, published]


def _publish_only(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """The one write a Succeeded job takes: it adds status.published and nothing else."""
    if old.get("published") is not None or new.get("published") is None:
        return False
    rest = {k: v for k, v in new.items() if k != "published"}
    return rest == {k: v for k, v in old.items() if k != "published"}


def _notify_only(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """The operator's record of a final job's event: status.notified and conditions only."""
    if new.get("notified") is None:
        return False
    keep = ("notified", "conditions")
    return {k: v for k, v in new.items() if k not in keep} == {
        k: v for k, v in old.items() if k not in keep
    }


def job_status_rules(old: dict[str, Any], new: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    """Messages of the TranscriptionJob status rules the change `old` → `new` breaks."""
    change = Change(old, new, spec)
    if change.old_phase in TERMINAL and new != old:
        if change.old_phase == "Succeeded" and _publish_only(old, new):
            return []
        if change.old_phase in ("Succeeded", "Failed") and _notify_only(old, new):
            return []
        return [f"a {change.old_phase} job is final: its status never changes"]
    return [message for rule in RULES for message in rule(change)]


def batch_status_rules(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The Batch CRD's status rule: no status from an older operator term."""
    before, after = old.get("operatorTerm"), new.get("operatorTerm")
    if after is not None and not 0 <= int(after) <= 2**31 - 1:
        return ["status.operatorTerm: must be between 0 and 2147483647"]
    if before is not None and (after is None or int(after) < int(before)):
        return [
            "status.operatorTerm is older than the stored one: this status comes from an "
            "operator replica that is no longer the leader"
        ]
    return []


def created(resource: Resource, obj: RawObject, suffix: str) -> RawObject:
    """`obj` as the API server stores it when created: a job with the CRD's defaults and
    `status: {phase: Queued}` whatever the body says, a Batch with a status, an Event named
    from its `generateName` (and `suffix`)."""
    if resource is JOBS:
        obj["spec"] = {**JOB_SPEC_DEFAULTS, **obj.get("spec", {})}
        obj["status"] = {"phase": "Queued"}
    elif resource is BATCHES:
        obj.setdefault("status", {})
    elif resource is EVENTS and not obj["metadata"].get("name"):
        obj["metadata"]["name"] = obj["metadata"].get("generateName", "") + suffix
    return obj


def refusal(resource: Resource, name: str, old: RawObject | None, new: RawObject) -> str | None:
    """Why the API server refuses to store `new` over `old` (None: created), or None."""
    if resource is CONFIG_MAPS:
        if old is not None and old.get("immutable") and old.get("data") != new.get("data"):
            return f'configmaps "{name}": field is immutable'
        data = new.get("data") or {}
        if sum(len(k.encode()) + len(v.encode()) for k, v in data.items()) > CONFIG_MAP_LIMIT:
            return (
                f'ConfigMap "{name}" is invalid: []: Too long: must have at most '
                f"{CONFIG_MAP_LIMIT} bytes"
            )
        return None
    if old is None or resource not in (JOBS, BATCHES):
        return None
    before, after = old.get("status") or {}, new.get("status") or {}
    if before == after:
        return None
    if resource is JOBS:
        broken = job_status_rules(before, after, old.get("spec") or {})
    else:
        broken = batch_status_rules(before, after)
    if not broken:
        return None
    return f"{resource.kind}.{resource.group} {name!r} is invalid: status: {'; '.join(broken)}"


def scale_of(obj: RawObject) -> RawObject:
    """A Deployment's scale subresource as the API server serves it."""
    meta = obj["metadata"]
    labels = obj["spec"]["selector"]["matchLabels"]
    return {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {k: meta[k] for k in ("name", "namespace", "resourceVersion") if k in meta},
        "spec": {"replicas": int(obj["spec"].get("replicas") or 0)},
        "status": {
            "replicas": int((obj.get("status") or {}).get("replicas") or 0),
            "selector": ",".join(f"{k}={v}" for k, v in sorted(labels.items())),
        },
    }


def written(
    resource: Resource, current: RawObject, new: RawObject, subresource: str | None
) -> RawObject:
    """What a write of `new` to `current` (or to its subresource) stores: the status alone, the
    replicas alone, or all but the status of a resource that has a status subresource."""
    if subresource == "status":
        out = {**current, "status": new.get("status")}
    elif subresource == "scale":
        out = copy.deepcopy(current)
        out["spec"]["replicas"] = int((new.get("spec") or {}).get("replicas") or 0)
    else:
        out = {**new, "metadata": {**current["metadata"], **(new.get("metadata") or {})}}
        if "status" in resource.subresources:
            out["status"] = current.get("status")
    return {k: v for k, v in out.items() if v is not None}
