"""Invariants 4 (one attempt per accepted result, and its transcript whole), 8 (the accepted
transcript kept in the bucket) and the part of 2 about results: each accepted result's lease
was real.

A worker's `completed` event logged after the final state was read says nothing about that
state (the job may have completed since): it is counted (`completed_after_final_read`), not
checked. The run reads the final state only after it stopped every process, so there are none
unless records of an older run are checked again."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Any

from recall.transcripts import attempt_dir, transcript_key
from recall_dev.chaos.history import History, LogEvent
from recall_dev.chaos.invariants.verdict import Verdict

# Who claimed which (job, attempt): {(worker, token[:8])}
Claims = defaultdict[tuple[str, int], set[tuple[str, str]]]
SEGMENT = re.compile(r"^(?P<job>\S+) chunk (?P<chunk>\d+) ")


def check_results(h: History, verdict: Verdict) -> None:
    """1 (no two workers claim one attempt), then for every job at the end: 4, 8, and 2 on
    its result."""
    claims = _claims(h, verdict)
    completed: defaultdict[str, list[LogEvent]] = defaultdict(list)
    for e in h.events("completed"):
        completed[e.get("job")].append(e)
    runs: defaultdict[str, Counter[tuple[int, int]]] = defaultdict(Counter)
    for r in h.engine:
        runs[r["job"]][(int(r["attempt"]), int(r["chunk"]))] += 1
    verdict.stats["duplicates"] = 0
    late = 0
    for name, final in h.final.jobs.items():
        told = [e for e in completed.get(name, []) if e.t <= h.final.read_at]
        late += len(completed.get(name, [])) - len(told)
        _told_once(name, told, verdict)
        result = final["status"].get("result")
        if result is None:
            if told:
                phase = final["status"].get("phase") or "Queued"
                verdict.add(
                    4,
                    name,
                    f"completed was logged but the job is {phase}",
                    *[
                        f"+{e.t - h.started:.2f}s {e.process} attempt={e.get('attempt')}"
                        for e in told
                    ],
                    f"final state read at +{h.final.read_at - h.started:.2f}s",
                )
            continue
        _result(name, final, result, told, verdict)
        _lease_real(h, name, result, claims, verdict)
        _transcript(h, name, final, result, runs.get(name, Counter()), verdict)
    verdict.stats["completed_after_final_read"] = late


def _claims(h: History, verdict: Verdict) -> Claims:
    """The claims the workers logged; no attempt claimed by two."""
    claims: Claims = defaultdict(set)
    for e in h.events("claimed"):
        claims[(e.get("job"), e.get("attempt"))].add((e.process, e.get("token")))
    for (job, attempt), who in claims.items():
        if len(who) > 1:
            verdict.add(1, job, f"attempt {attempt} claimed by more than one worker: {sorted(who)}")
    return claims


def _told_once(name: str, told: list[LogEvent], verdict: Verdict) -> None:
    """At most one attempt was told its result was accepted."""
    attempts_told = {(e.process, e.get("attempt"), e.get("token")) for e in told}
    if len(attempts_told) > 1:
        verdict.stats["duplicates"] += 1
        verdict.add(
            4,
            name,
            "more than one attempt was told its result was accepted",
            *[f"{e.process} attempt={e.get('attempt')} token={e.get('token')}" for e in told],
        )


def own_transcript(job: dict[str, Any], attempt: int, token: str) -> str:
    """The transcript key of `job`'s attempt `attempt` with lease token `token`."""
    directory = attempt_dir(
        job.get("namespace") or "", job["name"], job.get("uid") or "-", attempt, token
    )
    return transcript_key(directory)


def _result(
    name: str, job: dict[str, Any], result: dict[str, Any], told: list[LogEvent], verdict: Verdict
) -> None:
    """The result names its attempt's own transcript, and the attempt told is the accepted one."""
    token, attempt, worker = _named(result)
    own = own_transcript(job, int(attempt or 0), str(token))
    if result.get("transcript") != own:
        verdict.add(
            4,
            name,
            f"the result of attempt {attempt} references {result.get('transcript')}, "
            f"not that attempt's transcript {own}",
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


def _lease_real(
    h: History, name: str, result: dict[str, Any], claims: Claims, verdict: Verdict
) -> None:
    """2: the accepted result's lease was observed, or its claim logged."""
    token, attempt, worker = _named(result)
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


def _named(result: dict[str, Any]) -> tuple[Any, Any, Any]:
    """The token, attempt and worker a result names."""
    return result.get("token"), result.get("attempt"), result.get("worker")


def _transcript(
    h: History,
    name: str,
    final: dict[str, Any],
    result: dict[str, Any],
    runs: Counter[tuple[int, int]],
    verdict: Verdict,
) -> None:
    """8: the accepted transcript is in the bucket; 4: it is the accepted attempt's, holds
    every chunk once, in order, each transcribed by an attempt up to the accepted one, and none
    twice by the accepted one."""
    key = str(result.get("transcript") or "")
    data = h.final.transcripts.get(key)
    if data is None:
        verdict.add(8, name, f"the accepted transcript {key} is not in the bucket")
        return
    if "error" in data:
        verdict.add(4, name, f"the accepted transcript {key} cannot be read", str(data["error"]))
        return
    token, attempt, _ = _named(result)
    made_by = (data.get("job"), data.get("uid"), data.get("attempt"), data.get("token"))
    if made_by != (name, final.get("uid"), attempt, token):
        verdict.add(4, name, f"the transcript {key} was written by another attempt: {made_by}")
    engine = final["spec"].get("engine") or {}
    chunks = int((engine.get("simulate") or {}).get("chunks") or 0)
    chunk_seconds = float(engine.get("chunkSeconds") or 30)
    got = []
    for seg in data.get("segments") or []:
        m = SEGMENT.match(seg.get("text", ""))
        if not m or m["job"] != name:
            verdict.add(4, name, "a transcript segment of another job", str(seg)[:200])
            return
        got.append((int(m["chunk"]), float(seg.get("start", -1))))
    want = [(i, i * chunk_seconds) for i in range(chunks)]
    if got != want:
        verdict.add(4, name, "the transcript has gaps, overlaps or shifted times", f"chunks {got}")
    accepted = int(attempt or 0)
    for i in range(chunks):
        if not any(runs[(a, i)] for a in range(1, accepted + 1)):
            verdict.add(4, name, f"chunk {i} was never transcribed by attempt <= {accepted}")
        if runs[(accepted, i)] > 1:
            verdict.add(4, name, f"attempt {accepted} transcribed chunk {i} twice")
