"""`recall watch BATCH`: live progress of a Batch until it completes.

On a terminal: progress bars for the Batch and each item phase, the items being transcribed
with their chunk progress, those needing attention, the ETA, reclaims and heals, and the
operator's Reclaimed / Healed / Failed events as they happen; where the workers are autoscaled
(a Deployment labelled `recall.dev/autoscaling`), their count (current, desired, the reason of
the last decision) and scaling Events. Elsewhere (a pipe, CI): one plain line per change.

Each refresh reads the Batch (its status is bounded whatever the item count), its leased jobs
(at most one per worker) and its Events, so it stays live for 100,000 items. Exit code: 0 when
every item completed, 1 when any failed or was cancelled.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import ValidationError
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from recall.base.clock import SYSTEM
from recall.cli.listing import eta
from recall.kube import Api, ApiError, ObjectRef, RawObject, Selector
from recall.operator.scaling.scaler import STATUS_ANNOTATION
from recall.protocol.workers import ANNOTATION_SLOTS, LABEL_POOL
from recall.resources import DEFAULT_POOL, Batch, ItemPhase, TranscriptionJob

WATCHED_REASONS = ("Reclaimed", "Healed", "Failed", "ItemsInvalid", "JobNameConflict")
SCALING_REASONS = ("ScaledUp", "ScaledDown", "Draining", "ScalingRefused", "ScalingHeld")
AUTOSCALED = "recall.dev/autoscaling,recall.dev/autoscaling!=fixed"
SHOWN = 20
PHASE_STYLE = {
    ItemPhase.QUEUED: "grey62",
    ItemPhase.TRANSCRIBING: "cyan",
    ItemPhase.COMPLETED: "green",
    ItemPhase.FAILED: "red",
    ItemPhase.CANCELLED: "yellow",
}


class BatchNotFound(LookupError):
    """The Batch is missing, or stored in a shape its model cannot read."""


@dataclass
class Snapshot:
    batch: Batch
    leased: list[TranscriptionJob]
    events: list[str]
    workers: list[str]  # one line per autoscaled Deployment

    @property
    def exit_code(self) -> int:
        c = self.batch.status.counts
        return 1 if c is not None and (c.failed or c.cancelled) else 0


def fleet_line(deployment: RawObject) -> str:
    """`workers 3 → 5 (ScaledUp: …)`: an autoscaled worker Deployment as `watch` shows it;
    a pool's workers of several slots each also show their slots (`× 4 slots = 12`)."""
    meta, spec = deployment.get("metadata") or {}, deployment.get("spec") or {}
    name = meta.get("name") or "?"
    annotations, labels = meta.get("annotations") or {}, meta.get("labels") or {}
    try:
        status = json.loads(annotations.get(STATUS_ANNOTATION) or "{}")
    except ValueError:
        status = {}
    try:
        slots = max(1, int(annotations.get(ANNOTATION_SLOTS) or 1))
    except ValueError:
        slots = 1
    pool = labels.get(LABEL_POOL)
    title = f"workers {name}" + (f" (pool {pool})" if pool and pool != DEFAULT_POOL else "")
    current = status.get("current", spec.get("replicas", 0))

    def of(workers: object) -> str:
        if slots == 1 or not str(workers).isdigit():
            return str(workers)
        return f"{workers} × {slots} slots = {int(str(workers)) * slots}"

    if not status:  # KEDA's, or the operator has not decided yet
        mode = labels.get("recall.dev/autoscaling", "?")
        return f"{title}: {of(current)} ({mode})"
    return (
        f"{title}: {of(current)} → {of(status.get('desired'))} desired, "
        f"{status.get('draining', 0)} draining ({status.get('reason')}: {status.get('message')})"
    )


def _fleet(
    store: Api, namespace: str, since: dt.datetime, seen: set[str]
) -> tuple[list[str], list[str]]:
    """The autoscaled worker Deployments of `namespace` and their new scaling Events (nothing
    where the reader may not list Deployments)."""
    lines, events = [], []
    try:
        for d in store.list_deployments(namespace, AUTOSCALED):
            lines.append(fleet_line(d))
            ref = ObjectRef("Deployment", namespace, (d.get("metadata") or {}).get("name") or "")
            events += _new(store.list_events(namespace, ref), SCALING_REASONS, since, seen)
    except ApiError:
        return [], []
    return lines, events


def fetch(store: Api, namespace: str, name: str, since: dt.datetime, seen: set[str]) -> Snapshot:
    try:
        batch = store.get_batch(namespace, name)
    except ValidationError as e:  # stored before its CRD refused it (say, without a spec)
        first = e.errors()[0]
        where = ".".join(map(str, first["loc"])) or "the object"
        raise BatchNotFound(
            f'batches.recall.dev "{name}" cannot be read ({where}: {first["msg"]})'
        ) from e
    if batch is None:
        raise BatchNotFound(f'batches.recall.dev "{name}" not found')
    page = store.list_jobs(
        namespace, Selector(fields=f"spec.batchRef={name},status.phase=Leased"), limit=SHOWN
    )
    leased = [TranscriptionJob.from_api(o) for o in page.items]
    events = store.list_events(namespace, ObjectRef("Batch", namespace, name))
    new = _new(events, WATCHED_REASONS, since, seen)
    workers, scaling = _fleet(store, namespace, since, seen)
    return Snapshot(batch, leased, new + scaling, workers)


def _new(
    events: list[RawObject], reasons: tuple[str, ...], since: dt.datetime, seen: set[str]
) -> list[str]:
    """`reason: message` of the events with one of `reasons`, neither seen (now they are) nor
    last seen before `since`."""
    new = []
    for e in events:
        uid = (e.get("metadata") or {}).get("uid") or ""
        when = e.get("lastTimestamp") or e.get("eventTime") or ""
        if e.get("reason") not in reasons or uid in seen:
            continue
        if not when or dt.datetime.fromisoformat(when) >= since:
            seen.add(uid)
            new.append(f"{e.get('reason')}: {e.get('message')}")
    return new


def _head(b: Batch, now: dt.datetime) -> Text:
    c = b.status.counts
    return Text.assemble(
        ("Batch ", "bold"),
        (b.name, "bold cyan"),
        f"  {c.done if c else 0}/{c.total if c else 0} items  ",
        ("ETA ", "dim"),
        eta(b, now),
        ("   reclaims ", "dim"),
        str(b.status.expired_leases or 0),
        ("   heals ", "dim"),
        str(b.status.heals or 0),
        ("   failures ", "dim"),
        str(b.status.failures or 0),
        ("   SUSPENDED" if b.spec.suspend else "", "yellow bold"),
    )


def _phases(b: Batch) -> Table:
    c = b.status.counts
    total, done = (c.total, c.done) if c else (0, 0)
    grid = Table.grid(padding=(0, 2))
    grid.add_row(
        Text("all", style="bold"),
        ProgressBar(total=max(total, 1), completed=done, width=40),
        f"{done}/{total}",
    )
    for phase in ItemPhase:
        n = getattr(c, phase.value) if c else 0
        bar = ProgressBar(
            total=max(total, 1), completed=n, width=40, complete_style=PHASE_STYLE[phase]
        )
        grid.add_row(Text(phase.value, style=PHASE_STYLE[phase]), bar, str(n))
    return grid


def _leased(jobs: list[TranscriptionJob]) -> Table:
    table = Table(box=None, padding=(0, 2), show_edge=False)
    for col in ("TRANSCRIBING", "HOLDER", "ATTEMPT", "CHUNKS", ""):
        table.add_column(col, style="dim" if col == "TRANSCRIBING" else None)
    for job in jobs[:SHOWN]:
        prog = job.status.progress
        bar: RenderableType = ""
        if prog and prog.chunks_total:
            bar = ProgressBar(
                total=prog.chunks_total,
                completed=prog.chunks_done,
                width=20,
                complete_style="cyan",
            )
        table.add_row(
            job.spec.item or job.name,
            job.status.lease.holder if job.status.lease else "",
            str(job.status.attempts),
            (prog.summary or "") if prog else "",
            bar,
        )
    return table


def _attention(b: Batch) -> Table:
    table = Table(box=None, padding=(0, 2), show_edge=False)
    for col in ("NEEDS ATTENTION", "PHASE", "ATTEMPTS", "REASON"):
        table.add_column(col, style="dim" if col == "NEEDS ATTENTION" else None)
    for a in b.status.attention[:10]:
        table.add_row(
            a.key,
            Text(a.phase.value, style=PHASE_STYLE[a.phase]),
            str(a.attempts or 0),
            f"{a.reason or ''}: {a.message or ''}"[:80],
        )
    return table


def render(snap: Snapshot, history: list[str], now: dt.datetime) -> RenderableType:
    parts: list[RenderableType] = [_head(snap.batch, now), Text(""), _phases(snap.batch)]
    if snap.workers:
        parts += [Text(""), *(Text(line, style="magenta") for line in snap.workers)]
    if snap.leased:
        parts += [Text(""), _leased(snap.leased)]
    if snap.batch.status.attention:
        parts += [Text(""), _attention(snap.batch)]
    if history:
        parts += [Text(""), Text("events", style="bold")]
        parts += [Text(h, style=_event_style(h)) for h in history[-6:]]
    return Group(*parts)


def _event_style(event: str) -> str:
    if event.startswith(SCALING_REASONS[:3]):
        return "magenta"
    return "yellow" if event.startswith(("Reclaimed", "Healed")) else "red"


def summary_line(snap: Snapshot) -> str:
    b, c = snap.batch, snap.batch.status.counts
    workers = "".join(f"; {line}" for line in snap.workers)
    if c is None:
        return f"{b.name}: waiting for the operator{workers}"
    return (
        f"{b.name}: {c.completed}/{c.total} completed, {c.transcribing} transcribing, "
        f"{c.queued} queued, {c.failed} failed, {c.cancelled} cancelled; "
        f"reclaims {b.status.expired_leases or 0}, heals {b.status.heals or 0}, "
        f"progress {b.status.progress or '0%'}{workers}"
    )


def watch(
    store: Api,
    namespace: str,
    name: str,
    *,
    console: Console | None = None,
    interval: float = 0.5,
    timeout: float | None = None,
) -> int:
    """Follow the Batch until its Complete condition is True; returns the exit code."""
    console = console or Console()
    since = SYSTEM.now() - dt.timedelta(seconds=5)
    seen: set[str] = set()
    deadline = None if timeout is None else SYSTEM.monotonic() + timeout

    def follow(show: Callable[[Snapshot], None]) -> int:
        while True:
            snap = fetch(store, namespace, name, since, seen)
            show(snap)
            if snap.batch.status.complete:
                return snap.exit_code
            if deadline and SYSTEM.monotonic() > deadline:
                raise TimeoutError(f"batch {name} not complete after {timeout:.0f} s")
            SYSTEM.sleep(interval)

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
            live.update(render(snap, history, SYSTEM.now()))

        return follow(redraw)
