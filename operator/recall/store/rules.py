"""The CRDs' validation rules that the memory store can express, as pure functions.

These mirror the CEL rules in `crds/` so that unit tests running on `MemoryStore` meet the same
refusals a real API server gives; the real API server stays the judge (the integration tests run
the same careless writes against it). Each function returns the messages of the rules a write
breaks, empty when it is allowed. Objects are raw API dicts (camelCase), as stored.
"""

from __future__ import annotations

import re
from typing import Any

TERMINAL = ("Succeeded", "Failed", "Cancelled")
COUNTERS = ("attempts", "expiredLeases", "failures", "releases")
TOKEN = re.compile(r"[0-9a-f]{32}")


def _phase(status: dict[str, Any]) -> str:
    return str(status.get("phase") or "Queued")


def job_status_rules(old: dict[str, Any], new: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    """Messages of the TranscriptionJob status rules the change `old` → `new` breaks."""
    broken: list[str] = []
    phase, old_phase = _phase(new), _phase(old)
    lease, old_lease = new.get("lease"), old.get("lease")
    attempts = int(new.get("attempts") or 0)
    old_attempts = int(old.get("attempts") or 0)

    if (lease is not None) != (phase == "Leased"):
        broken.append("a lease exists exactly while the job is Leased")
    if lease is not None and not TOKEN.fullmatch(str(lease.get("token") or "")):
        broken.append("status.lease.token is 32 hexadecimal digits")
    if lease is not None and not str(new.get("fence") or "").startswith(f"{lease.get('token')}/"):
        broken.append("a Leased job's status.fence names its own lease token")
    if phase == "Leased" and attempts < 1:
        broken.append("a Leased job has at least one attempt")
    if old_phase in TERMINAL and new != old:
        broken.append(f"a {old_phase} job is final: its status never changes")
        return broken
    if old_lease is not None and new != old:
        fence = str(new.get("fence") or "")
        if not fence.startswith(f"{old_lease['token']}/") or fence == old.get("fence"):
            broken.append(
                "the job is leased: a write must present the lease token in status.fence "
                "as '<status.lease.token>/<new suffix>'"
            )
    if lease is not None and old_lease is not None:
        for f in ("token", "holder", "acquireTime"):
            if lease.get(f) != old_lease.get(f):
                broken.append("a lease is never replaced in place")
                break
    if lease is not None and old_lease is None and attempts != old_attempts + 1:
        broken.append("a new lease takes exactly one new attempt")
    if attempts != old_attempts and not (lease is not None and old_lease is None):
        broken.append("status.attempts changes only with a claim")
    for counter in COUNTERS:
        if counter in old and counter not in new:
            broken.append(f"status.{counter} cannot be removed")
        elif int(new.get(counter) or 0) < int(old.get(counter) or 0):
            broken.append(f"status.{counter} never decreases")
    releases, old_releases = int(new.get("releases") or 0), int(old.get("releases") or 0)
    if releases != old_releases and not (
        releases == old_releases + 1 and old_lease is not None and phase == "Queued"
    ):
        broken.append("status.releases grows by one, with a release")
    expired, old_expired = int(new.get("expiredLeases") or 0), int(old.get("expiredLeases") or 0)
    if expired != old_expired and not (
        expired == old_expired + 1 and old_lease is not None and lease is None
    ):
        broken.append("status.expiredLeases grows by one, when a lease ends")
    result, old_result = new.get("result"), old.get("result")
    if phase == "Succeeded" and result is None:
        broken.append("a Succeeded job carries status.result")
    if result is not None and phase != "Succeeded":
        broken.append("only a Succeeded job has a result")
    if old_result is not None and result != old_result:
        broken.append("the result never changes")
    if (
        phase == "Succeeded"
        and old_phase != "Succeeded"
        and (
            old_lease is None
            or result is None
            or result.get("token") != old_lease.get("token")
            or result.get("attempt") != old_attempts
        )
    ):
        broken.append(
            "Succeeded is reached only from Leased, with the lease's token and attempt in "
            "status.result"
        )
    if old_lease is None and lease is not None and old.get("backoffSeconds") is not None:
        broken.append("a job in backoff is not claimed until the operator ends the backoff")
    backoff = new.get("backoffSeconds")
    if (
        backoff is not None
        and backoff != old.get("backoffSeconds")
        and not (old_lease is not None and lease is None)
    ):
        broken.append("status.backoffSeconds is set only by the write that ends a lease (fail)")
    max_attempts = int(spec.get("maxAttempts", 5))
    max_releases = int(spec.get("maxReleases", 10))
    if (
        old_phase == "Queued"
        and phase == "Failed"
        and attempts < max_attempts + min(releases, max_releases)
    ):
        broken.append("a Queued job fails only when its attempts are spent")
    if new.get("offer") is not None and phase != "Queued":
        broken.append("only a Queued job is offered")
    if new.get("backoffSeconds") is not None and phase != "Queued":
        broken.append("only a Queued job waits in backoff")
    if attempts > max_attempts + min(releases, max_releases):
        broken.append("status.attempts cannot exceed spec.maxAttempts plus the free releases")
    return broken
