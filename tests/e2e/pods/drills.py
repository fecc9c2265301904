"""What the drills measure (tests/e2e/pods/test_drills.py, the upgrade test, and the short drill
of tests/e2e/kind).

A drill is a failure done to the deployed system on purpose, while a Batch runs. A `Ledger`
samples every job of the drill's namespace from the host every half second (phase, holder,
token, renewTime, chunks done, attempts, reclaims, releases, the accepted result and its
attempt, where it was published), so the figures come from what the API server said, not from
the components' own logs. The host, the kind nodes and their pods share one kernel clock: a
wall time the host reads and one a worker wrote (a renewTime, a log line) compare.

- **lease**: the jobs' `leaseDurationSeconds` in that drill.
- **in flight**: the jobs leased when the fault came. A drill takes the fault's time once the
  fault is complete (the cut's last rule in place, the node's container killed, ...).
- **back after**, measured one of two ways (**measured**):
  - `fault → new holder`, for the jobs in flight on a node the drill took away (killed, cut
    off): seconds from the fault until every one of them made progress under a new lease (a
    chunk more than it had when that lease was first seen, or Succeeded with a result that is
    not the old lease's). It includes waiting for the old lease to expire: a reclaim must.
  - `end → progress`, where the same workers go on (API server restarted, store pod deleted,
    drain, helm upgrade and rollback; the operator's node killed when no job was in flight on
    it): seconds from the end of the fault (the API server answering again, the new store pod
    ready, the drain or the helm command returned, the standby leading) until every job that
    was in flight at the fault and not Succeeded at its end made progress (a chunk more than at
    the end, under any lease, or Succeeded).
  The slowest job decides; a job that never made progress makes it infinite.
- **reclaimed**, **released**: leases the operator reclaimed, and jobs their worker released,
  during the Batch (deltas of `expiredLeases` and `releases` from the fault to the end).
- **duplicates**: jobs for which more than one accepted result was ever seen (another token,
  attempt or transcript: a result that changed, or came from two attempts), plus completions
  the Batch counts beyond its items (`counts.completed` over the number of items, an index
  listed twice in `completedIndexes`), plus, where the drill reads the results store, jobs
  whose results index entry (the published copy of the accepted transcript) was written by
  another attempt than the job's accepted result.
- **lost**: jobs of the Batch not Succeeded at the end.

`reclaim_delays` gives, per reclaimed job, the seconds from its lease's last renewal (the
renewTime its holder wrote) to the reclaim the ledger saw: never less than the lease when expiry
is judged right. `leases_of` and `stale_objects` give the cut drill its store check: the leases
the cut workers held, each with its last renewal, and the objects of those attempts written
after their renew deadline or only after the network returned.

`Figures.write()` keeps each drill's figures as JSON under `build/drills/` (RECALL_DRILLS_DIR)
and `table()` renders them as the Markdown table docs/drills.md and the README show.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from recall.kube.client import KubeClient as Kube
from recall.resources import API_VERSION
from recall.resources.indexes import decode
from recall.transcripts import parse_scratch

ROOT = Path(__file__).resolve().parents[3]
FROM_FAULT = "fault → new holder"
FROM_END = "end → progress"


def epoch(value: object) -> float:
    """An RFC 3339 time (a renewTime, a log line's timestamp) in seconds since the epoch; 0 for
    none."""
    if not value:
        return 0.0
    return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class Seen:
    at: float  # time.monotonic()
    wall: float  # time.time(), the same moment
    phase: str
    holder: str
    token: str
    renewed: float  # the lease's renewTime (epoch seconds), 0 without a lease
    chunks: int
    attempts: int
    reclaimed: int
    released: int
    result: str  # the accepted result's lease token, else its transcript key; "" before
    result_attempt: int  # the accepted result's attempt, 0 before
    published: str  # the results index key the operator published it to, "" before


def seen(job: dict[str, Any], at: float, wall: float = 0.0) -> Seen:
    status = job.get("status") or {}
    lease = status.get("lease") or {}
    result = status.get("result") or {}
    return Seen(
        at=at,
        wall=wall,
        phase=str(status.get("phase") or "Queued"),
        holder=str(lease.get("holder") or ""),
        token=str(lease.get("token") or ""),
        renewed=epoch(lease.get("renewTime")),
        chunks=int((status.get("progress") or {}).get("chunksDone") or 0),
        attempts=int(status.get("attempts") or 0),
        reclaimed=int(status.get("expiredLeases") or 0),
        released=int(status.get("releases") or 0),
        result=str(result.get("token") or result.get("transcript") or ""),
        result_attempt=int(result.get("attempt") or 0),
        published=str((status.get("published") or {}).get("index") or ""),
    )


@dataclass
class Ledger:
    """Samples the jobs of `namespace` every half second from a thread (module doc)."""

    kube: Kube
    namespace: str
    history: dict[str, list[Seen]] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> None:
        while not self.stop.wait(0.5):
            self.sample()

    def sample(self) -> None:
        try:
            jobs = self.kube.list_jobs(self.namespace).items
        except Exception:  # the API server is away (a drill): the next sample
            return
        now, wall = time.monotonic(), time.time()
        with self.lock:
            for job in jobs:
                name = job["metadata"]["name"]
                self.history.setdefault(name, []).append(seen(job, now, wall))

    def of(self, batch: str) -> dict[str, list[Seen]]:
        with self.lock:
            return {k: list(v) for k, v in self.history.items() if k.startswith(f"{batch}-")}

    def last(self, batch: str) -> dict[str, Seen]:
        return {k: v[-1] for k, v in self.of(batch).items() if v}

    def at(self, batch: str, when: float) -> dict[str, Seen]:
        """Each job as last seen at or before `when`."""
        return at(self.of(batch), when)


def at(history: Mapping[str, Sequence[Seen]], when: float) -> dict[str, Seen]:
    """Each job as last seen at or before `when` (jobs not seen by then are left out)."""
    found: dict[str, Seen] = {}
    for name, samples in history.items():
        before = [s for s in samples if s.at <= when]
        if before:
            found[name] = before[-1]
    return found


# -- the measures (pure: over the ledger's samples) ----------------------------------------------


def progressed(start: Seen, later: Sequence[Seen], *, another: bool) -> Seen | None:
    """The first of `later` (samples after `start`, in order) that shows the job made progress:
    Succeeded, or leased with a chunk more than its lease had when first seen (for `start`'s
    own lease: than at `start`). With `another`, progress must be under another lease than
    `start`'s: its chunks do not count, and a result of its token is none (None then)."""
    floors = {start.token: start.chunks}
    before = start
    for s in later:
        if s.phase == "Succeeded":
            if another and start.token and start.token in s.result:
                return None
            return s
        if s.phase == "Leased" and s.token:
            if s.token not in floors:
                floors[s.token] = min(before.chunks, s.chunks)
            if not (another and s.token == start.token) and s.chunks > floors[s.token]:
                return s
        before = s
    return None


def back_to_new_holder(
    history: Mapping[str, Sequence[Seen]], fault_at: float, jobs: Collection[str]
) -> float:
    """Seconds from `fault_at` until every one of `jobs` (in flight on the faulted node) made
    progress under another lease than the one it had at the fault; inf if one never did."""
    back = 0.0
    for name in jobs:
        samples = history.get(name, [])
        before = [s for s in samples if s.at <= fault_at]
        found = None
        if before:
            found = progressed(before[-1], [s for s in samples if s.at > fault_at], another=True)
        back = max(back, found.at - fault_at if found else math.inf)
    return back


def back_after_end(
    history: Mapping[str, Sequence[Seen]], fault_at: float, ended_at: float
) -> float:
    """Seconds from `ended_at` until every job leased at `fault_at` and not Succeeded at
    `ended_at` made progress (a chunk more, under any lease, or Succeeded); inf if one never
    did, 0 when there is none."""
    back = 0.0
    for samples in history.values():
        then = [s for s in samples if s.at <= fault_at]
        if not then or then[-1].phase != "Leased":
            continue
        end = [s for s in samples if s.at <= ended_at][-1]
        if end.phase == "Succeeded":
            continue
        found = progressed(end, [s for s in samples if s.at > ended_at], another=False)
        back = max(back, found.at - ended_at if found else math.inf)
    return back


def reclaim_delays(
    history: Mapping[str, Sequence[Seen]], fault_at: float, jobs: Collection[str]
) -> dict[str, float]:
    """For each of `jobs` reclaimed after `fault_at`: seconds from the last renewal of the lease
    it had at the fault (the renewTime its holder wrote) to the first sample that shows the
    reclaim. The sample comes up to half a second after the reclaim, so this is never less than
    the true delay."""
    found: dict[str, float] = {}
    for name in jobs:
        samples = history.get(name, [])
        before = [s for s in samples if s.at <= fault_at]
        if not before or not before[-1].token:
            continue
        start = before[-1]
        renewed = max(s.renewed for s in samples if s.token == start.token)
        reclaim = next(
            (s for s in samples if s.at > fault_at and s.reclaimed > start.reclaimed), None
        )
        if reclaim is not None and renewed:
            found[name] = reclaim.wall - renewed
    return found


def leases_of(
    history: Mapping[str, Sequence[Seen]], holders: Collection[str], since: float
) -> dict[str, float]:
    """The leases `holders` held (a job Leased by one of them) in a sample at or after `since`:
    token → its last renewal (the renewTime its holder wrote, epoch seconds)."""
    tokens = {
        s.token
        for samples in history.values()
        for s in samples
        if s.phase == "Leased" and s.holder in holders and s.token and s.at >= since
    }
    found: dict[str, float] = {}
    for samples in history.values():
        for s in samples:
            if s.token in tokens:
                found[s.token] = max(found.get(s.token, 0.0), s.renewed)
    return found


def stale_objects(
    before: Mapping[str, str],
    after: Mapping[str, str],
    deadlines: Mapping[str, float],
    *,
    cut_at: float,
    slack: float = 1.0,
) -> list[str]:
    """The store objects of the attempts in `deadlines` (lease token → the attempt's renew
    deadline, epoch seconds) that were written after it: their LastModified later than the
    deadline by more than `slack` (the store keeps it to the second), or absent from the
    listings `before` the network returned, present in one `after` (key → LastModified) and
    written after the cut (`cut_at`, epoch seconds): a write that landed while the node was
    cut off, or once it was back."""
    found = []
    for key, modified in sorted({**before, **after}.items()):
        parsed = parse_scratch(key)
        if parsed is None or parsed.token not in deadlines:
            continue
        written = epoch(modified)
        late = written > deadlines[parsed.token] + slack
        if late or (key not in before and written > cut_at + slack):
            found.append(key)
    return found


def target_node(workers: Mapping[str, str], nodes: Sequence[str], leader_node: str) -> str:
    """The worker node a drill takes away (cut off, killed): the first of `nodes` that does
    not run the leading operator and runs a worker of the release (`workers`: pod → node).
    ValueError when there is none: no job could be in flight there, and the drill would wait
    for one in vain (say where everything runs instead)."""
    running = set(workers.values())
    found = next((n for n in nodes if n != leader_node and n in running), None)
    if found is None:
        raise ValueError(
            f"no worker node without the leading operator ({leader_node}) runs a worker: "
            f"{dict(sorted(workers.items()))}"
        )
    return found


def duplicate_results(history: Mapping[str, Sequence[Seen]]) -> set[str]:
    """Jobs for which more than one accepted result was ever seen (token, attempt)."""
    return {
        name
        for name, samples in history.items()
        if len({(s.result, s.result_attempt) for s in samples if s.result}) > 1
    }


def extra_completions(completed: int, completed_indexes: str | None, items: int) -> int:
    """Completions a Batch status counts beyond its `items`: `counts.completed` over them, and
    indexes listed more than once in `completedIndexes`."""
    listed = list(decode(completed_indexes))
    return max(0, completed - items) + len(listed) - len(set(listed))


def index_mismatches(final: Mapping[str, Seen], entries: Mapping[str, str | None]) -> set[str]:
    """Jobs whose results index entry (`entries`: index key → the token in the entry, None when
    missing) was written by another lease than the job's accepted result."""
    found = set()
    for name, s in final.items():
        token = entries.get(s.published) if s.published else None
        if token and token not in s.result:
            found.add(name)
    return found


@dataclass
class Figures:
    drill: str
    jobs: int
    lease_seconds: int
    in_flight: int  # jobs leased when the fault came
    back_seconds: float
    back_measure: str  # FROM_FAULT or FROM_END
    reclaimed: int
    released: int
    duplicates: int
    lost: int
    notes: dict[str, Any] = field(default_factory=dict)

    def write(self) -> Path:
        out = Path(os.environ.get("RECALL_DRILLS_DIR") or ROOT / "build" / "drills")
        out.mkdir(parents=True, exist_ok=True)
        slug = "-".join("".join(c if c.isalnum() else " " for c in self.drill.lower()).split())
        path = out / f"{slug}.json"
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")
        print(f"\ndrill figures: {json.dumps(asdict(self))}")
        return path


def figures(
    ledger: Ledger,
    batch: str,
    drill: str,
    fault_at: float,
    n: int,
    *,
    lease: int,
    moved: Collection[str] = (),
    ended_at: float | None = None,
    index: Mapping[str, str | None] | None = None,
    **notes: Any,
) -> Figures:
    """The drill's figures from the ledger and the Batch's status (see the module doc); call
    once the Batch is done. `moved`: the jobs in flight on the node the drill took away (back
    after: fault → new holder); without them, `ended_at`, when the fault ended (end →
    progress). `index`: the results index entries read from the store (key → their token)."""
    if not moved and ended_at is None:
        raise ValueError("figures needs the jobs moved off the faulted node, or the fault's end")
    ledger.sample()
    history = ledger.of(batch)
    start = at(history, fault_at)
    final = ledger.last(batch)
    if moved:
        back, measure = back_to_new_holder(history, fault_at, moved), FROM_FAULT
    else:
        assert ended_at is not None
        back, measure = back_after_end(history, fault_at, ended_at), FROM_END
    found = ledger.kube.get_batch(ledger.namespace, batch)
    status = found.status if found is not None else None
    completed = status.counts.completed if status is not None and status.counts else 0
    extra = extra_completions(completed, status.completed_indexes if status else None, n)
    results = duplicate_results(history)
    mismatched = index_mismatches(final, index) if index is not None else set()
    notes["duplicates_by"] = {
        "results": len(results),
        "batch_status": extra,
        **({"results_index": len(mismatched)} if index is not None else {}),
    }
    if index is not None:
        notes["index_entries_missing"] = sorted(
            s.published for s in final.values() if s.published and index.get(s.published) is None
        )
    return Figures(
        drill=drill,
        jobs=n,
        lease_seconds=lease,
        in_flight=sum(1 for s in start.values() if s.phase == "Leased"),
        back_seconds=round(back, 1),
        back_measure=measure,
        reclaimed=sum(s.reclaimed - start.get(k, s).reclaimed for k, s in final.items()),
        released=sum(s.released - start.get(k, s).released for k, s in final.items()),
        duplicates=len(results | mismatched) + extra,
        lost=n - sum(1 for s in final.values() if s.phase == "Succeeded"),
        notes=notes,
    )


def batch_manifest(
    name: str,
    namespace: str,
    n: int,
    *,
    chunks: int,
    seconds: float,
    lease: int,
    checkpoint: float | None = 1,
) -> dict[str, Any]:
    """A Batch of `n` simulated jobs of `chunks` chunks, `seconds` each, under `lease`; a
    checkpoint every `checkpoint` seconds (None: the field left out, for the CRDs of a release
    from before it)."""
    manifest: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "Batch",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "defaults": {
                "leaseDurationSeconds": lease,
                "maxAttempts": 6,
                "engine": {
                    "name": "simulated",
                    "simulate": {"chunks": chunks, "chunkDelaySeconds": seconds},
                },
            },
            "items": [
                {"key": f"j{k}", "source": {"url": f"file:///media/{name}-{k}.wav"}}
                for k in range(n)
            ],
        },
    }
    if checkpoint is not None:  # progress the ledger sees that often
        manifest["spec"]["defaults"]["checkpointSeconds"] = checkpoint
    return manifest


COLUMNS = (
    ("drill", "drill"),
    ("jobs", "jobs"),
    ("lease_seconds", "lease (s)"),
    ("in_flight", "in flight"),
    ("back_seconds", "back after (s)"),
    ("back_measure", "measured"),
    ("reclaimed", "reclaimed"),
    ("released", "released"),
    ("duplicates", "duplicates"),
    ("lost", "lost"),
)
# The order of docs/drills.md; drills not named here come after, by name.
ORDER = (
    "api-server-restart", "store-pod-deleted", "worker-node-cut-off", "worker-node-killed",
    "active-operator-s-node-killed", "node-drained", "worker-node-killed-make-test-2-nodes",
    "helm-upgrade", "helm-rollback",
)  # fmt: skip


def also(notes: dict[str, Any]) -> str:
    """A drill's own figures, in words."""
    said = []
    if "unavailable" in notes:
        said.append(f"API server away {notes['unavailable']:.1f} s")
    if "store_ready_seconds" in notes:
        said.append(f"new store pod ready {notes['store_ready_seconds']:.1f} s after the delete")
    if "objects_lost" in notes:
        said.append(f"{notes['objects_before']} objects before, {notes['objects_lost']} lost")
    if "stopped_after_renewal_seconds" in notes:
        said.append(
            f"cut workers stopped {notes['stopped_after_renewal_seconds']:.1f} s after their "
            f"last renewal (renew deadline {notes['renew_deadline_seconds']:.0f} s)"
        )
    if "stale_store_writes" in notes:
        said.append(
            f"{notes['stale_store_writes']} store writes of theirs after it "
            f"({notes.get('their_objects_at_the_cut', '?')} objects of their attempts in the "
            "store at the cut, none new after)"
        )
    if "reclaimed_after_renewal_seconds" in notes:
        low, high = notes["reclaimed_after_renewal_seconds"]
        said.append(f"reclaimed {low:.1f} to {high:.1f} s after the last renewal")
    if "pods_still_shown_running" in notes:
        said.append(f"{notes['pods_still_shown_running']} dead pods still shown Running at the end")
    if "leader_after_seconds" in notes:
        said.append(
            f"standby led after {notes['leader_after_seconds']} s "
            f"(its Lease: {notes['operator_lease_seconds']} s)"
        )
    if "drain_seconds" in notes:
        said.append(f"the drain took {notes['drain_seconds']:.0f} s")
    return "; ".join(said)


def table(directory: Path | None = None) -> str:
    """The Markdown table of every drill's figures written so far."""
    d = directory or Path(os.environ.get("RECALL_DRILLS_DIR") or ROOT / "build" / "drills")
    found = {p.stem: json.loads(p.read_text()) for p in d.glob("*.json")}
    names = [n for n in ORDER if n in found] + sorted(n for n in found if n not in ORDER)
    lines = [
        "| " + " | ".join(title for _, title in COLUMNS) + " | also |",
        "| " + " | ".join("---" for _ in range(len(COLUMNS) + 1)) + " |",
    ]
    for name in names:
        row = found[name]
        cells = [str(row.get(key, "?")) for key, _ in COLUMNS] + [also(row.get("notes") or {})]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
