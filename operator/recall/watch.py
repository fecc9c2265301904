"""`recall watch BATCH`: live progress of a Batch until it completes.

On a terminal: progress bars for the Batch and for each item phase, one line per item with its
job's chunk progress, the ETA, reclaims and heals counted, and the operator's Reclaimed /
Healed / Failed events as they happen. Elsewhere (a pipe, CI): one plain line per change.

Returns the exit code: 0 when every item completed, 1 when any failed or was cancelled.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from recall.kube import Kube
from recall.models import (
    GROUP,
    JOB_PLURAL,
    LABEL_BATCH,
    VERSION,
    Batch,
    ItemPhase,
    TranscriptionJob,
)
from recall.transcripts import label_value

WATCHED_REASONS = ("Reclaimed", "Healed", "Failed")
PHASE_STYLE = {
    ItemPhase.QUEUED: "grey62",
    ItemPhase.TRANSCRIBING: "cyan",
    ItemPhase.COMPLETED: "green",
    ItemPhase.FAILED: "red",
    ItemPhase.CANCELLED: "yellow",
}


class BatchNotFound(LookupError):
    pass


@dataclass
class Snapshot:
    batch: Batch
    jobs: dict[str, TranscriptionJob]
    events: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.batch.status.complete

    @property
    def exit_code(self) -> int:
        c = self.batch.status.counts
        return 1 if c is not None and (c.failed or c.cancelled) else 0


def fetch(kube: Kube, namespace: str, name: str, since: dt.datetime, seen: set[str]) -> Snapshot:
    raw = kube.get_batch(namespace, name)
    if raw is None:
        raise BatchNotFound(f'batches.{GROUP} "{name}" not found')
    batch = Batch.from_api(raw)
    out = kube.custom.list_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        JOB_PLURAL,
        label_selector=f"{LABEL_BATCH}={label_value(name)}",
        _request_timeout=15,
    )
    jobs = {j.spec.item or j.name: j for j in (TranscriptionJob.from_api(o) for o in out["items"])}
    snap = Snapshot(batch, jobs)
    for e in kube.core.list_namespaced_event(namespace, _request_timeout=15).items:
        if e.reason not in WATCHED_REASONS or e.metadata.uid in seen:
            continue
        if e.involved_object.kind != "Batch" or e.involved_object.name != name:
            continue
        when = e.last_timestamp or e.event_time or e.metadata.creation_timestamp
        if when is not None and when < since:
            continue
        seen.add(e.metadata.uid)
        snap.events.append(f"{e.reason}: {e.message}")
    return snap


def _eta(batch: Batch, now: dt.datetime) -> str:
    if batch.status.eta is None:
        return "-"
    return f"{max(0, int((batch.status.eta - now).total_seconds()))}s"


def render(snap: Snapshot, history: list[str], now: dt.datetime) -> RenderableType:
    b = snap.batch
    c = b.status.counts
    total = c.total if c else len(b.spec.items)
    done = (c.completed + c.failed + c.cancelled) if c else 0
    head = Text.assemble(
        ("Batch ", "bold"),
        (b.name, "bold cyan"),
        f"  {done}/{total} items  ",
        ("ETA ", "dim"),
        _eta(b, now),
        ("   reclaims ", "dim"),
        str(b.status.expired_leases or 0),
        ("   heals ", "dim"),
        str(b.status.heals or 0),
        ("   failures ", "dim"),
        str(b.status.failures or 0),
        ("   SUSPENDED" if b.spec.suspend else "", "yellow bold"),
    )
    phases = Table.grid(padding=(0, 2))
    phases.add_row(
        Text("all", style="bold"),
        ProgressBar(total=max(total, 1), completed=done, width=40),
        f"{done}/{total}",
    )
    for phase in ItemPhase:
        n = getattr(c, phase.value) if c else (total if phase is ItemPhase.QUEUED else 0)
        phases.add_row(
            Text(phase.value, style=PHASE_STYLE[phase]),
            ProgressBar(
                total=max(total, 1), completed=n, width=40, complete_style=PHASE_STYLE[phase]
            ),
            str(n),
        )
    items = Table(box=None, padding=(0, 2), show_edge=False)
    for col in ("ITEM", "PHASE", "HOLDER", "ATTEMPTS", "CHUNKS", ""):
        items.add_column(col, style="dim" if col == "ITEM" else None)
    shown = b.spec.items[:25]
    for item in shown:
        st = b.status.items.get(item.key)
        phase = st.phase if st else ItemPhase.QUEUED
        job = snap.jobs.get(item.key)
        prog = job.status.progress if job else None
        holder = job.status.lease.holder if job and job.status.lease else ""
        bar: RenderableType = ""
        if prog and prog.chunks_total:
            bar = ProgressBar(
                total=prog.chunks_total,
                completed=prog.chunks_done,
                width=20,
                complete_style=PHASE_STYLE[phase],
            )
        items.add_row(
            item.key,
            Text(phase.value, style=PHASE_STYLE[phase]),
            holder,
            str(job.status.attempts if job else 0),
            prog.summary or "" if prog else "",
            bar,
        )
    parts: list[RenderableType] = [head, Text(""), phases, Text(""), items]
    if len(b.spec.items) > len(shown):
        parts.append(Text(f"... and {len(b.spec.items) - len(shown)} more items", style="dim"))
    if history:
        parts += [Text(""), Text("events", style="bold")]
        parts += [
            Text(h, style="yellow" if h.startswith(("Reclaimed", "Healed")) else "red")
            for h in history[-6:]
        ]
    return Group(*parts)


def summary_line(snap: Snapshot) -> str:
    b, c = snap.batch, snap.batch.status.counts
    if c is None:
        return f"{b.name}: waiting for the operator"
    return (
        f"{b.name}: {c.completed}/{c.total} completed, {c.transcribing} transcribing, "
        f"{c.queued} queued, {c.failed} failed, {c.cancelled} cancelled; "
        f"reclaims {b.status.expired_leases or 0}, heals {b.status.heals or 0}, "
        f"progress {b.status.progress or '0%'}"
    )


def watch(
    kube: Kube,
    namespace: str,
    name: str,
    *,
    console: Console | None = None,
    interval: float = 0.5,
    timeout: float | None = None,
) -> int:
    """Follow the Batch until its Complete condition is True; returns the exit code."""
    console = console or Console()
    since = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5)
    seen: set[str] = set()
    deadline = None if timeout is None else time.monotonic() + timeout

    def follow(show: Callable[[Snapshot], None]) -> int:
        while True:
            snap = fetch(kube, namespace, name, since, seen)
            show(snap)
            if snap.complete:
                return snap.exit_code
            if deadline and time.monotonic() > deadline:
                raise TimeoutError(f"batch {name} not complete after {timeout:.0f} s")
            time.sleep(interval)

    if not console.is_terminal:
        last = [""]

        def print_changes(snap: Snapshot) -> None:
            for e in snap.events:
                console.print(e, highlight=False, soft_wrap=True)
            line = summary_line(snap)
            if line != last[0]:
                console.print(line, highlight=False, soft_wrap=True)
                last[0] = line

        return follow(print_changes)

    history: list[str] = []
    with Live(console=console, refresh_per_second=8, transient=False) as live:

        def redraw(snap: Snapshot) -> None:
            history.extend(snap.events)
            live.update(render(snap, history, dt.datetime.now(dt.UTC)))

        return follow(redraw)
