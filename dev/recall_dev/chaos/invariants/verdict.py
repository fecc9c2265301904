"""What the checks report, and the words they share: the invariants' names, `Verdict` (every
violation with its evidence, the numbers of the run, the kill samples), how a job version is
shown as evidence, and the marks of the careless client's stale writes."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from recall.resources import Phase
from recall_dev.chaos.history import Version

TERMINAL = {Phase.SUCCEEDED.value, Phase.FAILED.value, Phase.CANCELLED.value}
FORGED = "forged-"  # how the transcript keys of the stale writes begin
PROBE = "/probe-"  # the fence suffix stale writes use
CARELESS = "careless"  # the holder a stolen lease would name
NAMES = {
    1: "one valid lease at a time",
    2: "no accepted write from a non-holder",
    3: "no job lost",
    4: "one attempt per accepted result",
    5: "a renewed lease is never reclaimed",
    6: "Batch items and publish records converge",
    7: "attempts bounded",
    8: "nothing referenced deleted, nothing unreferenced kept",
    9: "no process ended on its own",
    10: "the API server holds the ledger only",
    12: "kill -> Queued within lease + 2 ticks",
}
RECLAIM_DELAY = 12  # the reclaim delay's number: not one of DESIGN §5's


@dataclass(frozen=True)
class Violation:
    invariant: int
    job: str | None
    message: str
    evidence: tuple[str, ...] = ()

    def describe(self) -> str:
        head = f"[{self.invariant}: {NAMES[self.invariant]}] {self.job or '-'}: {self.message}"
        return "\n    ".join([head, *self.evidence])


@dataclass(frozen=True)
class KillSample:
    """A worker killed while it held a lease, and when its job was Queued again."""

    t: float
    worker: str
    job: str
    lease: float
    delay: float | None  # None: the lease did not end by a reclaim
    ended_by: str
    recovered: float | None  # when the operator / control plane was back, if it was down
    bound: float


# What is not checked when the drain timed out: without every job ended these say nothing.
SKIPPED_WITHOUT_DRAIN = (
    "3 (no job lost: the jobs not ended are listed instead)",
    "6 (every item shows its job's phase and every Succeeded job is published, at the end)",
    "8 (nothing unreferenced left in the bucket)",
)


@dataclass(frozen=True)
class DrainTimeout:
    """The drain ran out of time: jobs not ended by its deadline. Not an invariant violation
    by itself (a slow run looks the same as a stuck one); the checks that need a finished
    drain are left out (`SKIPPED_WITHOUT_DRAIN`)."""

    jobs: tuple[str, ...]
    evidence: tuple[str, ...] = ()

    @property
    def line(self) -> str:
        return f"drain timed out: {len(self.jobs)} jobs not ended"

    def describe(self) -> str:
        head = f"[drain timed out] {len(self.jobs)} jobs not ended by the drain's deadline"
        skipped = "not checked without a finished drain: " + "; ".join(SKIPPED_WITHOUT_DRAIN)
        return "\n    ".join([head, *self.evidence, skipped])


@dataclass
class Verdict:
    violations: list[Violation] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    kills: list[KillSample] = field(default_factory=list)
    drain: DrainTimeout | None = None  # set when the drain ran out of time

    def add(self, invariant: int, job: str | None, message: str, *evidence: str) -> None:
        self.violations.append(Violation(invariant, job, message, tuple(evidence)))

    def by_invariant(self) -> Counter[int]:
        return Counter(v.invariant for v in self.violations)


def show(v: Version, start: float) -> str:
    """One version, for evidence."""
    lease = v.lease
    held = f"{lease['holder']}/{lease['token'][:8]}" if lease else "-"
    result = v.result or {}
    res = f" result={result.get('worker')}/{str(result.get('token'))[:8]}#{result.get('attempt')}"
    return (
        f"rv={v.rv} seen=+{v.t - start:.2f}s{' (listed)' if v.listed else ''} {v.phase} "
        f"lease={held} fence={short_fence(v.fence)}"
        f" attempts={v.attempts} expired={v.counter('expiredLeases')} "
        f"releases={v.counter('releases')} failures={v.counter('failures')}"
        + (f" renew={lease['renewTime']}" if lease else "")
        + (res if result else "")
    )


def short_fence(fence: str | None) -> str:
    if not fence:
        return "-"
    token, _, suffix = fence.partition("/")
    return f"{token[:8]}/{suffix}"
