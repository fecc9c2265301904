"""The invariants of DESIGN §5, checked on the recorded history of a chaos run. Pure.

`check(history) -> Verdict`: every violation with its evidence, and the numbers of the run.

What can be checked, and from what:

1. *One valid lease at a time.* The API server's history of a job is linear (one
   resourceVersion after another), so "at most one valid lease" means: a lease exists exactly
   while the job is Leased; a new lease token appears only with a claim (attempts + 1, fence
   `<token>/1`, from a version without a lease); a token, once another has written, never
   writes again (its fence runs are contiguous); a token's holder, attempt and acquireTime
   never change; and no two workers log a claim of the same attempt. Observed *times* add
   nothing here: the recorder sees one job's versions in order, so its observed intervals
   never overlap by construction. A frozen worker may still *believe* it holds an expired
   lease; that is allowed, as long as nothing it writes is accepted (2).
2. *No accepted write from a non-holder.* Every write to a leased job presents the lease token
   (checked on consecutive versions: the version after a Leased one carries that token in its
   fence); Succeeded is reached only from Leased, and its result names that lease's token,
   attempt and holder; a result never changes and a finished job never changes; each accepted
   result's token belongs to a lease that was observed or whose claim was logged; every stale
   write the run sent without a resourceVersion was refused, and no version carries one.
3. *No job lost.* Every submitted job exists at the end and ended (Succeeded, Failed or
   Cancelled) within the drain bound, with workers alive.
4. *One attempt per accepted result.* At most one attempt per job was told its result was
   accepted (the workers' `completed` events), and it is the accepted one; the result names
   that attempt's own transcript ConfigMap, which holds every chunk exactly once, in order;
   each of its chunks was transcribed by an attempt up to the accepted one, and the accepted
   attempt transcribed no chunk twice.
5. *A renewed lease is never reclaimed.* For each reclaim (fence `<token>/reclaim-<n>`), the
   lease's last renewal seen before it, against when the reclaim was seen: the renewal was
   applied at or after its `renewTime` (the holder's wall clock when it computed the write) and
   the reclaim before the recorder saw it, so `seen(reclaim) - renewTime < duration` proves
   the reclaim came less than a lease after a renewal was applied. One machine, one wall
   clock: these times compare. The check cannot false-alarm; it can miss a violation smaller
   than one request's latency plus the recorder's lag, and a renewal the recorder did not see.
6. *Batch items converge.* At the end, within one reconcile period (DESIGN §4), every item's
   phase in the Batch status (compressed ranges) is its job's; and no Batch version ever moves
   an item back out of completed, failed or cancelled (its job cannot leave those phases).
7. *Attempts are bounded.* In every version `attempts <= maxAttempts + min(releases,
   maxReleases)`, and every attempt that ended was counted once (`attempts == expiredLeases +
   releases + failures`, plus one while Leased or once Succeeded); poison jobs end Failed.
8. *Nothing an accepted result references is deleted.* Every result's ConfigMap exists at the
   end.
9. *No worker or operator ended on its own.* Every process ended because the run killed it,
   stopped it (SIGTERM) or it hit an armed crash point. A stopped process that does not exit
   with 0 is reported in the line, not counted here: it was asked to stop.

And the reclaim delay (reported as invariant 10): a worker killed while it held a lease (by
the run, or by itself at a crash point, timed when the run noticed) — its job must be Queued
again within `lease + 2 ticks` while the operator is up; when a leading operator or the control
plane was down meanwhile, within `lease + 2 ticks` of its coming back.

Measured and reported, not asserted: how far Batch items lag their jobs while the operator is
up, the reclaim margin of (5), unreferenced transcript and chunk ConfigMaps left at the end.
"""

from __future__ import annotations

import bisect
import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from signal import SIGTERM
from typing import Any

from recall.fanout import job_name
from recall.models import ITEM_PHASE_OF_JOB, BatchStatus, Phase
from recall.projection import CODES, stored_phases
from recall.transcripts import manifest_name
from recall_dev.chaos.fleet import CRASH_POINT, EXITED, KILLED, TERMINATED
from recall_dev.chaos.history import Fault, History, JobHistory, Version, epoch
from recall_dev.chaos.workload import PERMANENT, POISON

TERMINAL = {Phase.SUCCEEDED.value, Phase.FAILED.value, Phase.CANCELLED.value}
FORGED = "forged-"  # the result ConfigMap name stale writes use
PROBE = "/probe-"  # the fence suffix stale writes use
CARELESS = "careless"  # the holder a stolen lease would name
NAMES = {
    1: "one valid lease at a time",
    2: "no accepted write from a non-holder",
    3: "no job lost",
    4: "one attempt per accepted result",
    5: "a renewed lease is never reclaimed",
    6: "Batch items converge",
    7: "attempts bounded",
    8: "referenced transcripts kept",
    9: "no process ended on its own",
    10: "kill -> Queued within lease + 2 ticks",
}


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


@dataclass
class Verdict:
    violations: list[Violation] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    kills: list[KillSample] = field(default_factory=list)

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


def check(h: History) -> Verdict:
    verdict = Verdict()
    for job in h.jobs.values():
        _leases(h, job, verdict)
        _attempts(h, job, verdict)
    _results(h, verdict)
    _probes(h, verdict)
    _lost(h, verdict)
    _reclaims(h, verdict)
    _items(h, verdict)
    _processes(h, verdict)
    _kills(h, verdict)
    _item_lags(h, verdict)
    _stats(h, verdict)
    return verdict


# -- 1, 2: leases and writes ---------------------------------------------------------------


def _leases(h: History, job: JobHistory, verdict: Verdict) -> None:
    s = h.started
    seen: dict[str, Version] = {}
    last_attempt = 0
    runs: list[tuple[str, Version]] = []
    for v in job.versions:
        if (v.phase == Phase.LEASED) != (v.lease is not None):
            verdict.add(
                1, job.name, "a lease exists outside Leased (or Leased without one)", show(v, s)
            )
        if v.lease is not None and v.fence_token != v.token:
            verdict.add(
                2, job.name, "a leased version whose fence does not present its token", show(v, s)
            )
        if v.fence_token and (not runs or runs[-1][0] != v.fence_token):
            runs.append((v.fence_token, v))
        token = v.token
        if token is None or v.lease is None:
            continue
        first = seen.get(token)
        if first is None:
            if v.attempts <= last_attempt:
                verdict.add(1, job.name, "a new lease without a new attempt", show(v, s))
            last_attempt = max(last_attempt, v.attempts)
            seen[token] = v
        elif first.lease is not None and (
            first.attempts != v.attempts
            or first.lease["holder"] != v.lease["holder"]
            or first.lease["acquireTime"] != v.lease["acquireTime"]
        ):
            verdict.add(1, job.name, "a lease changed in place", show(first, s), show(v, s))
    counts = Counter(token for token, _ in runs)
    for token, n in counts.items():
        if n > 1:
            around = [show(v, s) for t, v in runs if t == token][:4]
            verdict.add(
                1, job.name, f"token {token[:8]} wrote again after another lease's writes", *around
            )
    for p, v in job.consecutive():
        if p.lease is not None and v.status != p.status and v.fence_token != p.token:
            verdict.add(
                2, job.name, "a write to a leased job without its token", show(p, s), show(v, s)
            )
        if (
            p.lease is None
            and v.lease is not None
            and (v.attempts != p.attempts + 1 or v.fence != f"{v.token}/1")
        ):
            verdict.add(1, job.name, "a claim that is not one new attempt", show(p, s), show(v, s))
        if p.phase in TERMINAL and v.status != p.status:
            verdict.add(2, job.name, "a finished job changed", show(p, s), show(v, s))
        if v.phase == Phase.SUCCEEDED and p.phase != Phase.SUCCEEDED:
            r = v.result or {}
            if p.lease is None:
                verdict.add(
                    2, job.name, "Succeeded not reached from Leased", show(p, s), show(v, s)
                )
            elif (r.get("token"), r.get("attempt"), r.get("worker")) != (
                p.token,
                p.attempts,
                p.lease["holder"],
            ):
                verdict.add(2, job.name, "the result is not the holder's", show(p, s), show(v, s))
    results = [v for v in job.versions if v.result is not None]
    for v in results[1:]:
        if v.result != results[0].result:
            verdict.add(2, job.name, "an accepted result changed", show(results[0], s), show(v, s))
            break
    for v in job.versions:
        forged = str((v.result or {}).get("configMap", "")).startswith(FORGED)
        if PROBE in (v.fence or "") or forged or (v.lease or {}).get("holder") == CARELESS:
            verdict.add(
                2, job.name, "a stale write without resourceVersion was applied", show(v, s)
            )


def _results(h: History, verdict: Verdict) -> None:
    """2 (the result's lease was real) and 4 (one attempt told it won; transcript content)."""
    claims: defaultdict[tuple[str, int], set[tuple[str, str]]] = defaultdict(set)
    for e in h.events("claimed"):
        claims[(e.get("job"), e.get("attempt"))].add((e.process, e.get("token")))
    for (job, attempt), who in claims.items():
        if len(who) > 1:
            verdict.add(1, job, f"attempt {attempt} claimed by more than one worker: {sorted(who)}")
    completed: defaultdict[str, list[Any]] = defaultdict(list)
    for e in h.events("completed"):
        completed[e.get("job")].append(e)
    runs: defaultdict[str, Counter[tuple[int, int]]] = defaultdict(Counter)
    for r in h.engine:
        runs[r["job"]][(int(r["attempt"]), int(r["chunk"]))] += 1
    verdict.stats["duplicates"] = 0
    for name, final in h.final.jobs.items():
        status = final["status"]
        result = status.get("result")
        told = completed.get(name, [])
        attempts_told = {(e.process, e.get("attempt"), e.get("token")) for e in told}
        if len(attempts_told) > 1:
            verdict.stats["duplicates"] += 1
            verdict.add(
                4,
                name,
                "more than one attempt was told its result was accepted",
                *[f"{e.process} attempt={e.get('attempt')} token={e.get('token')}" for e in told],
            )
        if result is None:
            if told:
                verdict.add(4, name, f"completed was logged but the job is {status.get('phase')}")
            continue
        token, attempt, worker = result.get("token"), result.get("attempt"), result.get("worker")
        if result.get("configMap") != manifest_name(name, int(attempt or 0)):
            verdict.add(
                4,
                name,
                f"the result of attempt {attempt} references {result.get('configMap')}, "
                f"not that attempt's transcript {manifest_name(name, int(attempt or 0))}",
            )
        for e in told:
            if (e.process, e.get("attempt"), e.get("token")) != (worker, attempt, token[:8]):
                verdict.add(
                    4,
                    name,
                    "a worker was told its result was accepted, but another one is",
                    f"told {e.process} attempt={e.get('attempt')} token={e.get('token')}",
                    f"accepted {worker} attempt={attempt} token={token[:8]}",
                )
        history = h.jobs.get(name)
        observed = any(
            v.token == token and v.attempts == attempt and (v.lease or {}).get("holder") == worker
            for v in (history.versions if history else [])
        )
        logged = (worker, token[:8]) in claims.get((name, attempt), set())
        if not observed and not logged:
            verdict.add(
                2,
                name,
                "the accepted result's lease was never observed nor its claim logged",
                f"result {worker} attempt={attempt} token={token[:8]}",
            )
        _transcript(h, name, final, result, runs.get(name, Counter()), verdict)


SEGMENT = re.compile(r"^(?P<job>\S+) chunk (?P<chunk>\d+) ")


def _transcript(
    h: History,
    name: str,
    final: dict[str, Any],
    result: dict[str, Any],
    runs: Counter[tuple[int, int]],
    verdict: Verdict,
) -> None:
    data = h.final.config_maps.get(result.get("configMap", ""))
    if data is None:
        verdict.add(8, name, f"the result's ConfigMap {result.get('configMap')} is missing")
        return
    engine = final["spec"].get("engine") or {}
    chunks = int((engine.get("simulate") or {}).get("chunks") or 0)
    chunk_seconds = float(engine.get("chunkSeconds") or 30)
    segments = json.loads(data.get("segments.json", "[]"))
    got = []
    for seg in segments:
        m = SEGMENT.match(seg.get("text", ""))
        if not m or m["job"] != name:
            verdict.add(4, name, "a transcript segment of another job", str(seg)[:200])
            return
        got.append((int(m["chunk"]), float(seg.get("start", -1))))
    want = [(i, i * chunk_seconds) for i in range(chunks)]
    if got != want:
        verdict.add(4, name, "the transcript has gaps, overlaps or shifted times", f"chunks {got}")
    accepted = int(result.get("attempt") or 0)
    for i in range(chunks):
        if not any(runs[(a, i)] for a in range(1, accepted + 1)):
            verdict.add(4, name, f"chunk {i} was never transcribed by attempt <= {accepted}")
        if runs[(accepted, i)] > 1:
            verdict.add(4, name, f"attempt {accepted} transcribed chunk {i} twice")


def _probes(h: History, verdict: Verdict) -> None:
    for f in h.faults:
        if f.kind == "stale-write" and f.detail.get("outcome") == "accepted":
            verdict.add(
                2,
                f.target,
                "a write with a stale token and no resourceVersion was accepted",
                json.dumps(f.detail)[:400],
            )


# -- 3: no job lost ------------------------------------------------------------------------


def _lost(h: History, verdict: Verdict) -> None:
    lost = 0
    for name in sorted(h.expected):
        final = h.final.jobs.get(name)
        if final is None:
            lost += 1
            verdict.add(3, name, "the job does not exist at the end")
            continue
        phase = final["status"].get("phase") or "Queued"
        if phase not in TERMINAL:
            lost += 1
            job = h.jobs.get(name)
            tail = [show(v, h.started) for v in (job.versions[-3:] if job else [])]
            verdict.add(3, name, f"still {phase} at the end of the drain", *tail)
    verdict.stats["lost"] = lost


# -- 5: a renewed lease is never reclaimed -------------------------------------------------


def _reclaims(h: History, verdict: Verdict) -> None:
    margins: list[float] = []
    unverified = 0
    for job in h.jobs.values():
        last_of: dict[str, Version] = {}
        fence = None
        for v in job.versions:
            if v.token:
                last_of[v.token] = v
            if v.fence and v.fence != fence and "/reclaim-" in v.fence:
                p = last_of.get(v.fence_token or "")
                if p is None or p.lease is None:
                    unverified += 1
                else:
                    renewed = epoch(p.lease["renewTime"]) or 0.0
                    margin = v.t - renewed - float(p.lease["durationSeconds"])
                    margins.append(margin)
                    if margin < 0:
                        holder = p.lease["holder"]
                        logs = [
                            f"+{e.t - h.started:.2f}s {e.process} {e.event}"
                            for e in h.logs
                            if e.process == holder and e.get("job") == job.name
                        ][-6:]
                        verdict.add(
                            5,
                            job.name,
                            f"reclaimed {v.t - renewed:.2f} s after a renewal of a "
                            f"{p.lease['durationSeconds']} s lease",
                            show(p, h.started),
                            show(v, h.started),
                            *logs,
                        )
            fence = v.fence
    verdict.stats["reclaims"] = len(margins) + unverified
    verdict.stats["reclaim_margin_min"] = min(margins) if margins else None
    verdict.stats["reclaims_unverified"] = unverified


# -- 6: items converge ---------------------------------------------------------------------


def _items(h: History, verdict: Verdict) -> None:
    bad = 0
    for b in h.final.batches:
        name = b["metadata"]["name"]
        items = (b.get("spec") or {}).get("items") or []
        status = BatchStatus.model_validate(b.get("status") or {})
        codes = stored_phases(status, len(items))
        wrong = []
        for i, item in enumerate(items):
            job = h.final.jobs.get(job_name(name, item["key"]))
            want = ITEM_PHASE_OF_JOB[Phase(job["status"].get("phase") or "Queued")] if job else None
            if status.counts is None or CODES[codes[i]] != want:
                wrong.append(f"{item['key']}: item {CODES[codes[i]]}, job {want}")
        if wrong:
            bad += len(wrong)
            verdict.add(6, name, f"{len(wrong)} item(s) differ from their jobs", *wrong[:10])
        _no_way_back(h, name, items, verdict)
    verdict.stats["unconverged"] = bad
    if h.converged is not None and h.drained is not None:
        verdict.stats["converge_seconds"] = h.converged - h.drained


def _no_way_back(h: History, batch: str, items: list[Any], verdict: Verdict) -> None:
    """A job never leaves Succeeded, Failed or Cancelled (and none is deleted here), so once
    a Batch version shows an item completed, failed or cancelled, no later one may show it in
    another phase: that would be the Batch lying."""
    recorded = h.batches.get(batch)
    if recorded is None:
        return
    final: dict[int, tuple[Any, Version]] = {}
    reported: set[int] = set()
    for v in recorded.versions:
        if v.status.get("counts") is None:
            continue
        codes = stored_phases(BatchStatus.model_validate(v.status), len(items))
        for i in range(len(items)):
            phase = CODES[codes[i]]
            was = final.get(i)
            if was is None:
                if phase.terminal:
                    final[i] = (phase, v)
            elif phase != was[0] and i not in reported:
                reported.add(i)
                verdict.add(
                    6,
                    batch,
                    f"item {items[i]['key']} moved back from {was[0]} to {phase}",
                    f"Batch rv={was[1].rv} seen=+{was[1].t - h.started:.2f}s: {was[0]}",
                    f"Batch rv={v.rv} seen=+{v.t - h.started:.2f}s: {phase}",
                )


# -- 7: attempts ---------------------------------------------------------------------------


def _attempts(h: History, job: JobHistory, verdict: Verdict) -> None:
    for v in job.versions:
        spec = v.spec
        releases = v.counter("releases")
        budget = int(spec.get("maxAttempts", 5)) + min(releases, int(spec.get("maxReleases", 10)))
        if v.attempts > budget:
            verdict.add(
                7, job.name, f"attempts {v.attempts} over the budget {budget}", show(v, h.started)
            )
            break
        ended = v.counter("expiredLeases") + releases + v.counter("failures")
        open_ = 1 if v.phase in (Phase.LEASED, Phase.SUCCEEDED) else 0
        if v.attempts != ended + open_:
            verdict.add(
                7,
                job.name,
                "an attempt was not counted exactly once when it ended",
                show(v, h.started),
            )
            break
    kind = h.expected.get(job.name)
    final = h.final.jobs.get(job.name)
    if final is None:
        return
    status = final["status"]
    if kind == POISON and status.get("phase") == Phase.SUCCEEDED:
        verdict.add(7, job.name, "a poison job succeeded")
    if kind == POISON and status.get("phase") == Phase.FAILED:
        reason = (status.get("lastError") or {}).get("reason")
        if reason not in ("SimulatedFailure", "LeaseExpired"):
            verdict.add(7, job.name, f"a poison job failed without its reason: {reason}")
    if kind == PERMANENT and status.get("phase") == Phase.SUCCEEDED:
        verdict.add(7, job.name, "a permanently failing job succeeded")


# -- 9: processes --------------------------------------------------------------------------


def _processes(h: History, verdict: Verdict) -> None:
    ends: Counter[str] = Counter()
    unclean = []
    for p in h.processes:
        ends[p.reason or "alive"] += 1
        if p.reason == EXITED:
            verdict.add(
                9, None, f"{p.role} {p.name} exited on its own (code {p.returncode})", p.tail
            )
        elif (
            p.reason == TERMINATED
            and p.returncode != 0
            # SIGTERM before the handler is installed (it is, before the first log line)
            and not (p.returncode == -SIGTERM and not p.tail)
        ):
            # Told to stop, it stopped, but not cleanly (an abort at exit, say): not an
            # invariant of DESIGN §5, reported in the line.
            unclean.append(f"{p.name}: {p.returncode}")
    verdict.stats["ends"] = dict(ends)
    verdict.stats["unclean_stops"] = unclean


# -- kill -> Queued ------------------------------------------------------------------------


def disruptions(h: History) -> list[tuple[float, float]]:
    """When no operator could reclaim: a leading operator killed or stopped (until a leader is
    elected again, or it is continued), the API server or etcd restarting (until ready)."""
    out: list[tuple[float, float]] = []
    elected = sorted(e.t for e in h.events("leader_elected"))
    for f in h.faults:
        if f.kind == "control-plane-restart":
            out.append((f.t, float(f.detail.get("ready") or h.faults_ended)))
        elif f.kind in ("operator-kill", "operator-stop") and f.detail.get("leader"):
            ends = [t for t in elected if t > f.t]
            if f.kind == "operator-stop" and f.detail.get("continued"):
                ends.append(float(f.detail["continued"]))
            out.append((f.t, min(ends) if ends else h.faults_ended))
    return out


def _kills(h: History, verdict: Verdict) -> None:
    down = disruptions(h)
    two_ticks = 2 * h.tick
    for f in h.faults:
        if f.kind not in ("worker-kill", "worker-crash"):
            continue
        for held in f.detail.get("leases", []):
            job = h.jobs.get(held["job"])
            if job is None:
                continue
            sample = _kill_sample(f, held, job, down, two_ticks)
            verdict.kills.append(sample)
            if sample.delay is None:
                continue
            if sample.delay > sample.bound:
                verdict.add(
                    10,
                    sample.job,
                    f"Queued {sample.delay:.2f} s after {sample.worker} was killed "
                    f"(bound {sample.bound:.2f} s, lease {sample.lease:g} s"
                    + (
                        f", back up +{sample.recovered - sample.t:.2f} s)"
                        if sample.recovered
                        else ")"
                    ),
                    *[show(v, h.started) for v in job.versions if v.t >= f.t - 3][:6],
                )


def _kill_sample(
    f: Fault, held: dict[str, Any], job: JobHistory, down: list[tuple[float, float]], ticks: float
) -> KillSample:
    token = held["token"]
    lease = float(held["duration"])
    holding = [i for i, v in enumerate(job.versions) if v.token == token]
    delay, ended_by = None, "still leased"
    if holding and holding[-1] + 1 < len(job.versions):
        after = job.versions[holding[-1] + 1]
        if after.fence == f"{token}/reclaim-{job.versions[holding[-1]].attempts}":
            delay, ended_by = after.t - f.t, "reclaim"
        else:
            ended_by = "its holder" if after.fence_token == token else "unknown"
    # While the leading operator or the control plane is down, nobody can reclaim; once back,
    # a correct operator reclaims within a lease and two ticks of its first observation. So
    # each disruption that begins before the expected reclaim moves it to its end + lease +
    # 2 ticks (disruptions over before the kill do not matter: the acting operator then saw
    # the lease by the kill at the latest).
    expected = f.t + lease + ticks
    recovered = None
    for start, end in sorted(down):
        if start <= expected and end >= f.t:
            expected = max(expected, end + lease + ticks)
            recovered = max(recovered or 0.0, end)
    bound = expected - f.t
    return KillSample(f.t, str(f.target), job.name, lease, delay, ended_by, recovered, bound)


# -- how far the Batch status lags its jobs (measured, not asserted) -------------------------


def _item_lags(h: History, verdict: Verdict) -> None:
    """For every change of a Batch job's phase while the operator was up: the time until a
    Batch version the recorder saw shows the item in that phase (changes overtaken by the next
    one before they were shown are left out)."""
    down = disruptions(h)
    lags: list[float] = []
    for b in h.final.batches:
        name = b["metadata"]["name"]
        items = (b.get("spec") or {}).get("items") or []
        recorded = h.batches.get(name)
        if recorded is None:
            continue
        shown = [
            (v.t, stored_phases(BatchStatus.model_validate(v.status), len(items)))
            for v in recorded.versions
            if v.status.get("counts") is not None
        ]
        times = [t for t, _ in shown]
        for i, item in enumerate(items):
            job = h.jobs.get(job_name(name, item["key"]))
            if job is None:
                continue
            changes: list[tuple[float, Any]] = []
            for v in job.versions:
                phase = ITEM_PHASE_OF_JOB[Phase(v.phase)]
                if not changes or changes[-1][1] != phase:
                    changes.append((v.t, phase))
            for k, (t, phase) in enumerate(changes):
                until = changes[k + 1][0] if k + 1 < len(changes) else float("inf")
                # the two watches may deliver a few ms apart
                start = bisect.bisect_left(times, t - 0.05)
                seen = next((tb for tb, codes in shown[start:] if CODES[codes[i]] == phase), None)
                if seen is None or seen > until:
                    continue
                if any(a <= seen and e >= t for a, e in down):
                    continue
                lags.append(max(0.0, seen - t))
    lags.sort()
    verdict.stats["item_lag_samples"] = len(lags)
    verdict.stats["item_lag_max"] = lags[-1] if lags else None
    verdict.stats["item_lag_p99"] = lags[int(0.99 * (len(lags) - 1))] if lags else None


# -- numbers -------------------------------------------------------------------------------


def _stats(h: History, verdict: Verdict) -> None:
    s = verdict.stats
    phases = Counter(
        (j["status"].get("phase") or "Queued") for n, j in h.final.jobs.items() if n in h.expected
    )
    s["jobs"] = len(h.expected)
    s["phases"] = dict(phases)
    s["max_attempts"] = max(
        (int(j["status"].get("attempts") or 0) for j in h.final.jobs.values()), default=0
    )
    # a worker-crash record is the run noticing a crash point, already counted as one
    faults = Counter(f.kind for f in h.faults if f.kind != "worker-crash")
    faults += Counter(f.kind for f in h.self_faults)
    s["faults"] = dict(faults)
    up = [k for k in verdict.kills if k.delay is not None and k.recovered is None]
    down = [k for k in verdict.kills if k.delay is not None and k.recovered is not None]
    s["kill_samples"] = len(up)
    s["max_kill_to_queued"] = max(up, key=lambda k: k.delay or 0.0, default=None)
    s["kill_samples_disrupted"] = len(down)
    s["max_kill_to_queued_disrupted"] = max((k.delay or 0.0 for k in down), default=None)
    referenced = {(j["status"].get("result") or {}).get("configMap") for j in h.final.jobs.values()}
    s["orphan_transcripts"] = sum(1 for name in h.final.config_maps if name not in referenced)
    s["chunk_maps_left"] = len(h.final.chunk_maps)
    s["tick_errors"] = len(h.events("tick_failed"))
    s["relists"] = len(h.relists)
    s["drain_seconds"] = None if h.drained is None else h.drained - h.faults_ended
    s["self_ends"] = Counter(p.reason for p in h.processes if p.reason in (KILLED, CRASH_POINT))
