"""What the drills (tests/e2e/pods/test_drills.py, and the short one of tests/e2e/kind) measure.

A drill is a failure done to the deployed system on purpose, while a Batch runs. A `Ledger`
samples every job of the drill's namespace from the host every half second (phase, holder,
token, attempts, reclaims, releases, chunks done, the accepted result), so the figures come
from what the API server said, not from the components' own logs:

- **back**: seconds from the fault until every job that was in flight runs again: leased by
  another holder, or by the same holder with more chunks done, or Succeeded;
- **reclaimed**, **released**: leases the operator reclaimed, and jobs released by their
  worker, during the Batch (deltas of `expiredLeases` and `releases`);
- **duplicates**: jobs for which two different accepted results were ever seen (the CRD's
  rules forbid it; this counts what happened);
- **lost**: jobs of the Batch not Succeeded at the end.

`Figures.write()` keeps each drill's figures as JSON under `build/drills/` (RECALL_DRILLS_DIR)
and `table()` renders them as the Markdown table docs/drills.md and the README show.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from recall.kube.store import KubeStore as Kube
from recall.resources import API_VERSION

ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Seen:
    at: float  # time.monotonic()
    phase: str
    holder: str
    token: str
    chunks: int
    attempts: int
    reclaimed: int
    released: int
    result: str  # the accepted result's lease token, "" before


def seen(job: dict[str, Any], at: float) -> Seen:
    status = job.get("status") or {}
    lease = status.get("lease") or {}
    result = status.get("result") or {}
    return Seen(
        at=at,
        phase=str(status.get("phase") or "Queued"),
        holder=str(lease.get("holder") or ""),
        token=str(lease.get("token") or ""),
        chunks=int((status.get("progress") or {}).get("chunksDone") or 0),
        attempts=int(status.get("attempts") or 0),
        reclaimed=int(status.get("expiredLeases") or 0),
        released=int(status.get("releases") or 0),
        result=str(result.get("token") or result.get("transcript") or ""),
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
        now = time.monotonic()
        with self.lock:
            for job in jobs:
                name = job["metadata"]["name"]
                self.history.setdefault(name, []).append(seen(job, now))

    def of(self, batch: str) -> dict[str, list[Seen]]:
        with self.lock:
            return {k: list(v) for k, v in self.history.items() if k.startswith(f"{batch}-")}

    def last(self, batch: str) -> dict[str, Seen]:
        return {k: v[-1] for k, v in self.of(batch).items() if v}

    def at(self, batch: str, when: float) -> dict[str, Seen]:
        """Each job as last seen at or before `when`."""
        found: dict[str, Seen] = {}
        for name, samples in self.of(batch).items():
            before = [s for s in samples if s.at <= when]
            if before:
                found[name] = before[-1]
        return found


@dataclass
class Figures:
    drill: str
    jobs: int
    in_flight: int  # jobs leased when the fault came
    back_seconds: float
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
    ledger: Ledger, batch: str, drill: str, fault_at: float, n: int, **notes: Any
) -> Figures:
    """The drill's figures from the ledger (see the module doc); call once the Batch is done."""
    ledger.sample()
    history = ledger.of(batch)
    before = ledger.at(batch, fault_at)
    final = ledger.last(batch)
    in_flight = {name: s for name, s in before.items() if s.phase == "Leased"}
    back = 0.0
    for name, then in in_flight.items():
        later = [s for s in history[name] if s.at > fault_at and _moved(then, s)]
        back = max(back, (later[0].at - fault_at) if later else float("inf"))
    duplicates = sum(
        1 for samples in history.values() if len({s.result for s in samples} - {""}) > 1
    )
    start = {name: s for name, s in before.items()}
    return Figures(
        drill=drill,
        jobs=n,
        in_flight=len(in_flight),
        back_seconds=round(back, 1),
        reclaimed=sum(s.reclaimed - start.get(k, s).reclaimed for k, s in final.items()),
        released=sum(s.released - start.get(k, s).released for k, s in final.items()),
        duplicates=duplicates,
        lost=n - sum(1 for s in final.values() if s.phase == "Succeeded"),
        notes=notes,
    )


def _moved(then: Seen, now: Seen) -> bool:
    """The job runs again: another holder, more chunks done by the same one, or done."""
    if now.phase == "Succeeded":
        return True
    if now.phase != "Leased":
        return False
    return now.token != then.token or now.chunks > then.chunks


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
    ("in_flight", "in flight"),
    ("back_seconds", "back after (s)"),
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
    if "objects_lost" in notes:
        said.append(f"{notes['objects_before']} objects before, {notes['objects_lost']} lost")
    if "stopped_after_seconds" in notes:
        said.append(
            f"cut workers stopped {notes['stopped_after_seconds']:.1f} s after the cut "
            f"(renew deadline {notes['renew_deadline_seconds']:.0f} s)"
        )
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
        cells = [str(row[key]) for key, _ in COLUMNS] + [also(row.get("notes") or {})]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
