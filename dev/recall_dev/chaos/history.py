"""The recorded history of a chaos run, loaded for the invariant checks.

Sources, all on one machine, all stamped with its wall clock (so their times compare):
- the job recorder's JSONL (`recorder.JobRecorder`): every job version seen, when;
- the processes' JSON logs: workers' `claimed`, `chunk_done`, `completed`, `lease_lost` ...,
  operators' `leader_elected`, `reclaimed`, `tick_failed` ...;
- the simulated engine's record file: one line per transcribed chunk (job, attempt, pid);
- the run's own fault log: what was done to which process, when;
- the leader tracker's holder changes;
- the final state, read once every process of the run was stopped: jobs and Batches, the
  bucket's listing, the accepted transcripts read back from it, the published copies compared
  with what they copy, the namespace's ConfigMaps, each job's size.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recall.resources import Phase

Obj = dict[str, Any]


def epoch(value: str | None) -> float | None:
    """Seconds since the epoch of an RFC 3339 time, or None."""
    if not value:
        return None
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class Version:
    """One version of a job as the recorder saw it. `segment` counts the recorder's re-lists
    before it: two versions of one job seen by the watch (not LISTED) in the same segment are
    consecutive versions of that job (a watch delivers every change)."""

    t: float
    rv: int
    segment: int
    listed: bool
    spec: Obj
    status: Obj

    @property
    def phase(self) -> str:
        return str(self.status.get("phase") or Phase.QUEUED)

    @property
    def lease(self) -> Obj | None:
        lease: Obj | None = self.status.get("lease")
        return lease

    @property
    def token(self) -> str | None:
        return self.lease["token"] if self.lease else None

    @property
    def fence(self) -> str | None:
        fence: str | None = self.status.get("fence")
        return fence

    @property
    def fence_token(self) -> str | None:
        return self.fence.split("/", 1)[0] if self.fence else None

    @property
    def attempts(self) -> int:
        return int(self.status.get("attempts") or 0)

    @property
    def result(self) -> Obj | None:
        result: Obj | None = self.status.get("result")
        return result

    def counter(self, name: str) -> int:
        return int(self.status.get(name) or 0)


@dataclass
class JobHistory:
    name: str
    versions: list[Version] = field(default_factory=list)  # by resourceVersion
    deleted: float | None = None

    def consecutive(self) -> Iterator[tuple[Version, Version]]:
        """Pairs of versions known to follow each other directly."""
        for p, v in zip(self.versions, self.versions[1:], strict=False):
            if not v.listed and v.segment == p.segment:
                yield p, v


@dataclass(frozen=True)
class LogEvent:
    t: float
    process: str
    event: str
    fields: Obj

    def get(self, key: str) -> Any:
        return self.fields.get(key)


@dataclass(frozen=True)
class Fault:
    t: float
    kind: str
    target: str | None
    detail: Obj


@dataclass(frozen=True)
class ProcessEnd:
    """How a process of the run ended (or `alive` at the end of the run)."""

    name: str
    role: str
    started: float
    fault: str | None
    ended: float | None
    reason: str | None
    returncode: int | None
    tail: str


@dataclass
class Final:
    """The state at the end, as `recall_dev.chaos.final.read_final` read it."""

    jobs: dict[str, Obj] = field(default_factory=dict)  # compact jobs by name
    batches: list[Obj] = field(default_factory=list)
    # an accepted result's transcript key -> what the bucket holds there: {"job", "uid",
    # "attempt", "token", "segments": [{"start", "text"}]}, or {"error": ...}; absent: missing
    transcripts: dict[str, Obj] = field(default_factory=dict)
    objects: list[str] = field(default_factory=list)  # every key in the bucket
    # a published copy in the bucket (index entry, output) -> "same" or "differs" from the
    # accepted result's object it copies
    copies: dict[str, str] = field(default_factory=dict)
    config_maps: dict[str, int] = field(default_factory=dict)  # name -> bytes of data
    job_bytes: dict[str, int] = field(default_factory=dict)  # name -> bytes as served
    read_at: float = 0.0  # when it was read (wall time)


@dataclass
class History:
    jobs: dict[str, JobHistory]
    relists: list[float]
    logs: list[LogEvent]
    self_faults: list[Fault]  # fault points the processes hit themselves
    engine: list[Obj]
    faults: list[Fault]
    leaders: list[tuple[float, str | None]]
    processes: list[ProcessEnd]
    final: Final
    expected: dict[str, str]  # job name -> workload kind
    started: float
    faults_ended: float
    drained: float | None  # when every job had ended (None: not within the bound)
    tick: float
    seed: int = 0
    profile: str = ""
    seconds: float = 0.0  # the whole run, start-up and checks included
    batches: dict[str, JobHistory] = field(default_factory=dict)  # Batch status versions
    converged: float | None = None  # when every item showed its job's phase at the end
    slack: float = 0.0  # seconds added to the kill -> Queued bound (see Profile.reclaim_slack)
    not_ended: list[str] = field(default_factory=list)  # at the drain's deadline, if it passed
    # when the operators had published every result and collected everything unreferenced,
    # after the drain (None: not within `settle_timeout`, or the drain timed out)
    settled: float | None = None
    settle_timeout: float = 0.0
    # the store's fault proxy: requests forwarded and answers lost, by method
    store_requests: dict[str, dict[str, int]] = field(default_factory=dict)

    def events(self, name: str) -> list[LogEvent]:
        return [e for e in self.logs if e.event == name]


def load_versions(path: Path) -> tuple[dict[str, JobHistory], list[float]]:
    jobs: dict[str, JobHistory] = {}
    relists: list[float] = []
    by_rv: dict[str, dict[int, Version]] = {}
    segment = 0
    if not path.exists():
        return jobs, relists
    with path.open() as f:
        for line in f:
            if not line.strip():
                continue
            rec = json.loads(line)
            if rec["type"] == "LIST":
                segment += 1
                relists.append(rec["t"])
                continue
            obj = rec["obj"]
            name = obj["name"]
            history = jobs.setdefault(name, JobHistory(name))
            if rec["type"] == "DELETED":
                history.deleted = history.deleted or rec["t"]
                continue
            seen = by_rv.setdefault(name, {})
            if obj["rv"] in seen:
                continue  # the same version again (a re-list): keep when it was first seen
            seen[obj["rv"]] = Version(
                t=rec["t"],
                rv=obj["rv"],
                segment=segment,
                listed=rec["type"] == "LISTED",
                spec=obj["spec"],
                status=obj["status"],
            )
    for name, versions in by_rv.items():
        jobs[name].versions = [versions[rv] for rv in sorted(versions)]
    return jobs, relists


SELF_FAULTS = {
    "recall: fault injected at": "crash-point",
    "recall: paused at": "freeze-before-write",
    "recall: answer of": "lost-answer",
}


def load_log(path: Path, process: str) -> tuple[list[LogEvent], list[Fault]]:
    """A process's JSON events, and the fault points it hit (plain lines, no time: they get
    the time of the event before them)."""
    events: list[LogEvent] = []
    hits: list[Fault] = []
    if not path.exists():
        return events, hits
    last = 0.0
    for line in path.read_text(errors="replace").splitlines():
        line = line.strip()
        if line.startswith("{"):
            for rec in _objects(line):
                t = epoch(rec.get("timestamp")) or last
                last = t
                events.append(LogEvent(t, process, str(rec.get("event", "")), rec))
            continue
        for prefix, kind in SELF_FAULTS.items():
            if line.startswith(prefix):
                hits.append(Fault(last, kind, process, {"line": line[:200]}))
    return events, hits


def _objects(line: str) -> Iterator[Obj]:
    """The JSON objects of one log line: two threads of a process may write theirs without a
    newline between them (`{...}{...}`); a cut one ends the line."""
    decoder = json.JSONDecoder()
    i = 0
    while i < len(line) and line[i] == "{":
        try:
            obj, i = decoder.raw_decode(line, i)
        except ValueError:
            return
        if isinstance(obj, dict):
            yield obj
        while i < len(line) and line[i].isspace():
            i += 1


def load_jsonl(path: Path) -> list[Obj]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            try:
                out.append(json.loads(line))
            except ValueError:  # a line cut by a SIGKILL mid-write
                continue
    return out


RUN_FILE = "run.json"


def save_run(h: History, workdir: Path) -> None:
    """What is not in the record files already (final state, processes, times), so that
    `load(workdir)` gives the same history again."""
    run = {
        "processes": [p.__dict__ for p in h.processes],
        "final": h.final.__dict__,
        "expected": h.expected,
        "started": h.started,
        "faults_ended": h.faults_ended,
        "drained": h.drained,
        "tick": h.tick,
        "seed": h.seed,
        "profile": h.profile,
        "seconds": h.seconds,
        "converged": h.converged,
        "slack": h.slack,
        "not_ended": h.not_ended,
        "settled": h.settled,
        "settle_timeout": h.settle_timeout,
        "store_requests": h.store_requests,
    }
    (workdir / RUN_FILE).write_text(json.dumps(run))
    (workdir / "faults.jsonl").write_text(
        "".join(
            json.dumps({"t": f.t, "kind": f.kind, "target": f.target, "detail": f.detail}) + "\n"
            for f in h.faults
        )
    )


def load(workdir: Path) -> History:
    """The history of a finished run from its directory."""
    run = json.loads((workdir / RUN_FILE).read_text())
    jobs, relists = load_versions(workdir / "jobs.jsonl")
    logs: list[LogEvent] = []
    self_faults: list[Fault] = []
    for log in sorted((workdir / "logs").glob("*.log")):
        events, hits = load_log(log, log.stem)
        logs.extend(events)
        self_faults.extend(hits)
    logs.sort(key=lambda e: e.t)
    return History(
        jobs=jobs,
        relists=relists,
        logs=logs,
        self_faults=self_faults,
        engine=load_jsonl(workdir / "engine.jsonl"),
        faults=[
            Fault(f["t"], f["kind"], f["target"], f["detail"])
            for f in load_jsonl(workdir / "faults.jsonl")
        ],
        leaders=[(r["t"], r.get("holder")) for r in load_jsonl(workdir / "leaders.jsonl")],
        processes=[ProcessEnd(**p) for p in run["processes"]],
        final=Final(**run["final"]),
        expected=run["expected"],
        started=run["started"],
        faults_ended=run["faults_ended"],
        drained=run["drained"],
        tick=run["tick"],
        seed=run.get("seed", 0),
        profile=run.get("profile", ""),
        seconds=run.get("seconds", 0.0),
        batches=load_versions(workdir / "batches.jsonl")[0],
        converged=run.get("converged"),
        slack=run.get("slack", 0.0),
        not_ended=run.get("not_ended", []),
        settled=run.get("settled"),
        settle_timeout=run.get("settle_timeout", 0.0),
        store_requests=run.get("store_requests", {}),
    )
