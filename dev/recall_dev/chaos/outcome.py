"""What a chaos run ends with: the verdict on its history, the one line that sums it up, and
the report of every violation.

A run is ok when no invariant was violated and the drain finished. A drain that ran out of
time is told apart from a broken invariant: the line begins "drain timed out: N jobs not
ended", the report lists those jobs and the checks left out, and "violations:" counts only
the checks that still mean something."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from recall_dev.chaos.history import History
from recall_dev.chaos.invariants import NAMES, Verdict


@dataclass
class Outcome:
    verdict: Verdict
    history: History
    workdir: Path

    @property
    def ok(self) -> bool:
        return not self.verdict.violations and self.verdict.drain is None

    @property
    def line(self) -> str:
        return summary_line(self.history, self.verdict)

    def report(self, limit: int = 40) -> str:
        """The drain's timeout, if it timed out, then every violation with its evidence (the
        first `limit`)."""
        v = self.verdict.violations
        parts = [self.verdict.drain.describe()] if self.verdict.drain else []
        parts += [x.describe() for x in v[:limit]]
        if len(v) > limit:
            parts.append(f"... and {len(v) - limit} more")
        return "\n".join(parts)


def summary_line(h: History, verdict: Verdict) -> str:
    """The one line of a run."""
    s = verdict.stats
    faults = s.get("faults", {})
    fault_text = ", ".join(f"{k} {n}" for k, n in sorted(faults.items()))
    phases = ", ".join(f"{k} {n}" for k, n in sorted(s.get("phases", {}).items()))
    margin = s.get("reclaim_margin_min")
    by = verdict.by_invariant()
    broken = ", ".join(f"{i}: {NAMES[i]} x{n}" for i, n in sorted(by.items())) or "none"
    drain = f"{verdict.drain.line}; " if verdict.drain else ""
    return (
        f"chaos seed={h.seed} {h.profile} {h.seconds:.0f} s: {drain}"
        f"faults {sum(faults.values())} ({fault_text}); "
        f"jobs {s.get('jobs', 0)} ({phases}); lost {_count(s.get('lost'))}; "
        f"duplicate accepted results {s.get('duplicates', 0)}; "
        f"items not converged {_count(s.get('unconverged'))}"
        f"{_after(s.get('converge_seconds'))}; "
        f"max attempts {s.get('max_attempts', 0)}; "
        f"max kill->Queued {_kill_text(h, verdict)}; "
        f"reclaims {s.get('reclaims', 0)} (min margin "
        f"{'n/a' if margin is None else f'{margin:+.2f} s'}); "
        f"item lag {_seconds(s.get('item_lag_p99'))} p99, {_seconds(s.get('item_lag_max'))} max; "
        f"store requests {_requests(h)}; "
        f"bucket: {s.get('objects', 0)} objects, {s.get('published', 0)} published, "
        f"{_count(s.get('objects_left') if h.drained is not None else None)} unreferenced left"
        f"{_settled(h, s.get('settle_seconds'))}; "
        f"largest job {s.get('job_bytes_max', 0)} B; "
        f"SIGTERMed processes that did not exit 0: {len(s.get('unclean_stops', []))}"
        f"{' (' + ', '.join(s['unclean_stops']) + ')' if s.get('unclean_stops') else ''}; "
        f"violations: {broken}"
    )


def _kill_text(h: History, verdict: Verdict) -> str:
    """The longest kill -> Queued delay while the operator was up, and while it was not."""
    s = verdict.stats
    kill = s.get("max_kill_to_queued")
    text = (
        f"{kill.delay:.2f} s (lease {kill.lease:g} s, bound lease + {2 * h.tick + h.slack:g} s; "
        f"{s.get('kill_samples', 0)} kills)"
        if kill is not None
        else "n/a (no kill of a lease holder while the operator was up)"
    )
    disrupted = s.get("max_kill_to_queued_disrupted")
    if disrupted is not None:
        text += (
            f"; {disrupted:.2f} s when the operator or the control plane was down meanwhile "
            f"({s.get('kill_samples_disrupted', 0)} kills, bound lease + "
            f"{2 * h.tick + h.slack:g} s after it was back)"
        )
    return text


def _requests(h: History) -> str:
    """How many store requests went through the fault proxy, and how many answers it lost."""
    forwarded = h.store_requests.get("forwarded", {})
    lost = h.store_requests.get("lost", {})
    text = ", ".join(f"{m} {n}" for m, n in sorted(forwarded.items())) or "none"
    lost_text = ", ".join(f"{m} {n}" for m, n in sorted(lost.items())) or "none"
    return f"{sum(forwarded.values())} ({text}; answers lost: {lost_text})"


def _count(n: int | None) -> str:
    return "n/a" if n is None else str(n)


def _settled(h: History, seconds: float | None) -> str:
    if h.drained is None:
        return ""
    if seconds is None:
        return f" (not settled {h.settle_timeout:.0f} s after the drain)"
    return f" (settled {seconds:.1f} s after the drain)"


def _after(seconds: float | None) -> str:
    return "" if seconds is None else f" (all {seconds:.1f} s after the last job ended)"


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"
