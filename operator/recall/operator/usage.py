"""What each team used: audio and engine seconds per namespace, as counters and a lasting record.

    usage = Usage(api, cache, leading=..., clock=clock)   # a listener of the job cache
    usage.run(stop)                                     # flushes the record every `every` s

The leader counts, from the job changes its cache sees:
- **engine seconds** when an attempt ends (its lease goes: completed, failed, released or
  reclaimed): from the lease's acquireTime to the job's completedAt when it ended the job, else
  to the lease's last renewal (a reclaim that fails the job, its attempts spent, is not the
  attempt ending it). Failed and abandoned attempts count: they cost.
- **audio seconds** of each Succeeded job whose result is published (a record only the operator
  writes, so a job that finished while no operator ran is counted too): the result's duration
  times its channels. **Once per job**, whatever the restarts, relists and leader changes
  (`counted.<day>`, below).

Both go to `recall_audio_seconds_total` and `recall_engine_seconds_total` (by namespace, pool
and engine) and to each namespace's ConfigMap `recall-usage`, one key per UTC day (`{"jobs",
"audioSeconds", "engineSeconds"}`), which outlives the jobs' TTL and Prometheus' retention
(`recall usage`).

**The record** is written at most every `every` seconds per namespace, each time as one update
at the version read (a conflict: read and decide again), so two leaders' writes never lose each
other's figures. Beside the days it keeps:
- `counted.<day>`: the mark (48 bits of a hash of the uid) of each job counted for that day
  (its completedAt), written with its seconds, for the last `KEEP_DAYS` days, at most
  `MAX_MARKS` a day. A restarted operator or a new leader, which finds every published job
  again, counts only those with no mark (a killed leader's unwritten counts included).
- `writes`: the ids of the last writes, so a write whose answer was lost is settled by reading
  them, never added twice.

Not guaranteed; every doubt is settled by not counting (usage errs low, never twice):
- engine seconds a killed operator had not written yet (`every` seconds at most) are lost, and
  an attempt that ended while no operator led is not counted;
- a job already published when this term first saw it is counted only if its day's marks are
  kept and not full: one published long before (counted then) or past a day's marks is left
  out, unless this process saw it published, and then it is not marked (only a change seen by
  two leaders at once, past the marks, counts twice);
- a false match of two marks (one in 2^48 per job and mark) leaves a job out.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import threading
import uuid
from collections import defaultdict
from dataclasses import dataclass, field

from recall.base import log, metrics
from recall.base.clock import SYSTEM, Clock
from recall.kube import Api, ApiError, Conflict
from recall.operator.reconcile.cache import JobCache
from recall.operator.reconcile.record import JobRecord
from recall.resources import Phase

_log = log.get("usage")
CONFIG_MAP = "recall-usage"
LABELS = {"app.kubernetes.io/name": "recall", "app.kubernetes.io/component": "usage"}
MARKS = "counted."  # + YYYY-MM-DD: the marks of the jobs counted for that day
WRITES = "writes"  # the ids of the last writes, newest last
KEEP_DAYS = 2  # a job's day and the day after: a job finished before midnight, published after
MAX_MARKS = 40_000  # a day (9 bytes each: two days' marks stay well under a ConfigMap's 1 MiB)
KEEP_WRITES = 16
TRIES = 5  # conflicts in one flush before it waits for the next

Day = tuple[str, str]  # (namespace, YYYY-MM-DD)
Labels = tuple[str, str, str]  # (namespace, pool, engine)


def mark(uid: str) -> str:
    """A job's mark in `counted.<day>`: 48 bits of a hash of its uid, 8 characters."""
    digest = hashlib.blake2b(uid.encode(), digest_size=6).digest()
    return base64.urlsafe_b64encode(digest).decode()


def attempt_seconds(old: JobRecord, new: JobRecord | None) -> float | None:
    """The engine seconds of the attempt that ended between `old` and `new` (pure), or None."""
    lease = old.lease
    if lease is None:
        return None
    if new is not None and new.lease is not None and new.lease.token == lease.token:
        return None
    end = lease.renew_time
    if (
        new is not None
        and new.phase.terminal
        and new.completed_at is not None
        # Reclaimed with no attempts left: Failed at the reclaim, but its holder was gone.
        and new.expired_leases == old.expired_leases
    ):
        end = max(end, new.completed_at)
    return max(0.0, (end - lease.acquire_time).total_seconds())


@dataclass
class Candidate:
    """A published job whose audio may still have to be counted (its mark decides)."""

    day: Day
    labels: Labels
    seconds: float
    seen: bool  # this process saw it being published (not only published already)


@dataclass
class Write:
    """One namespace's flush: what it adds, under one id (kept when its answer is lost)."""

    id: str
    engine: dict[str, float] = field(default_factory=dict)  # day: engine seconds
    candidates: dict[str, Candidate] = field(default_factory=dict)  # uid: the job
    counted: list[Candidate] = field(default_factory=list)  # decided at the last try


def decide(
    data: dict[str, str], w: Write, today: dt.date
) -> tuple[dict[str, str | None], list[Candidate]]:
    """The changes of `w` to the record `data` (pure), and the jobs it counts: those with no
    mark for their day, marked when the day's marks are kept and not full, else counted unmarked
    only if this process saw them published. Marks past `KEEP_DAYS` go; `w.id` joins `writes`."""
    oldest = today - dt.timedelta(days=KEEP_DAYS - 1)
    figures: defaultdict[str, dict[str, float]] = defaultdict(
        lambda: {"jobs": 0.0, "audioSeconds": 0.0, "engineSeconds": 0.0}
    )
    for day, seconds in w.engine.items():
        figures[day]["engineSeconds"] += seconds
    marks: dict[str, set[str]] = {}
    marked: set[str] = set()  # the days whose marks change
    counted = []
    for uid, c in w.candidates.items():
        day = c.day[1]
        if day not in marks:
            marks[day] = set((data.get(MARKS + day) or "").split())
        kept = dt.date.fromisoformat(day) >= oldest and len(marks[day]) < MAX_MARKS
        m = mark(uid)
        if m in marks[day] or not (kept or c.seen):
            continue
        if kept:
            marks[day].add(m)
            marked.add(day)
        figures[day]["audioSeconds"] += c.seconds
        figures[day]["jobs"] += 1
        counted.append(c)
    changes: dict[str, str | None] = {}
    for day, added in figures.items():
        try:
            stored = json.loads(data.get(day) or "{}")
        except ValueError:
            stored = {}
        merged = {k: round(float(stored.get(k, 0)) + v, 3) for k, v in added.items()}
        merged["jobs"] = int(merged["jobs"])
        changes[day] = json.dumps(merged, sort_keys=True)
    changes.update({MARKS + day: " ".join(sorted(marks[day])) for day in marked})
    for key in data:
        if key.startswith(MARKS) and _older(key[len(MARKS) :], oldest):
            changes[key] = None
    changes[WRITES] = " ".join([*(data.get(WRITES) or "").split(), w.id][-KEEP_WRITES:])
    return changes, counted


def _older(day: str, oldest: dt.date) -> bool:
    try:
        return dt.date.fromisoformat(day) < oldest
    except ValueError:
        return False


class Usage:
    """Counts usage from the job cache's changes; see the module doc."""

    def __init__(
        self, api: Api, cache: JobCache, *, leading: threading.Event, clock: Clock = SYSTEM
    ) -> None:
        self.api = api
        self.cache = cache
        self.leading = leading
        self.clock = clock
        self._lock = threading.Lock()
        self._engine: defaultdict[Day, float] = defaultdict(float)
        self._candidates: dict[str, Candidate] = {}  # by job uid
        self._unsure: dict[str, Write] = {}  # by namespace: a write whose answer was lost
        self._term = False
        cache.listeners.append(self.changed)

    def changed(self, old: JobRecord | None, new: JobRecord | None) -> None:
        """The cache's listener (under its lock): counts, never calls the API."""
        if not self.leading.is_set():
            return
        record = new or old
        assert record is not None
        labels = (record.namespace, record.pool, record.engine or "default")
        day = (self.clock.now() if new is None else new.completed_at or self.clock.now()).date()
        engine = attempt_seconds(old, new) if old is not None else None
        if engine is not None:
            metrics.ENGINE_SECONDS.labels(*labels).inc(engine)
            with self._lock:
                self._engine[(record.namespace, day.isoformat())] += engine
        if new is not None and (old is None or not old.published):
            seen = old is not None  # a change seen, not a job found published already
            self._candidate(new, seen)

    def _candidate(self, record: JobRecord, seen: bool) -> None:
        seconds = record.audio_seconds  # of its published result (the marks say if counted)
        published = record.phase is Phase.SUCCEEDED and record.published
        if not published or seconds is None or not record.uid:
            return
        day = (record.completed_at or self.clock.now()).date().isoformat()
        labels = (record.namespace, record.pool, record.engine or "default")
        with self._lock:
            known = self._candidates.get(record.uid)
            seen = seen or (known is not None and known.seen)
            self._candidates[record.uid] = Candidate((record.namespace, day), labels, seconds, seen)

    def run(self, stop: threading.Event, every: float = 30.0) -> None:
        while not self.clock.wait(stop, every):
            self.flush()
        self.flush()

    def flush(self) -> int:
        """Write what was counted to each namespace's ConfigMap; how many namespaces were
        written. A term's first flush looks at every published job in the cache (the marks
        decide which were counted). What could not be written is kept for the next flush."""
        if not self.leading.is_set():
            self._term = False
        elif not self._term:
            self._term = True
            for record in self.cache.all():
                self._candidate(record, seen=False)
        with self._lock:
            engine, self._engine = self._engine, defaultdict(float)
            candidates, self._candidates = self._candidates, {}
            unsure, self._unsure = self._unsure, {}
        writes: dict[str, Write] = {}
        for (namespace, day), seconds in engine.items():  # one entry per namespace and day
            writes.setdefault(namespace, Write(uuid.uuid4().hex[:12])).engine[day] = seconds
        for uid, c in candidates.items():
            writes.setdefault(c.day[0], Write(uuid.uuid4().hex[:12])).candidates[uid] = c
        written = 0
        for namespace in sorted({*writes, *unsure}):
            w: Write | None = writes.get(namespace)
            try:
                if namespace in unsure:
                    w = self._settle(namespace, unsure[namespace], w)
                    del unsure[namespace]
            except ApiError as e:  # not read: the lost write stays unsure, the rest waits
                _log.warning("usage_read_failed", namespace=namespace, error=e.message[:200])
                if w is not None:
                    self._keep(namespace, w, lost=False)
                continue
            if w is None:
                continue
            try:
                self._write(namespace, w)
                written += 1
            except ApiError as e:
                _log.warning("usage_write_failed", namespace=namespace, error=e.message[:200])
                self._keep(namespace, w, lost=not isinstance(e, Conflict))
        with self._lock:
            self._unsure.update(unsure)  # not settled: the next flush reads again
        return written

    def _settle(self, namespace: str, lost: Write, w: Write | None) -> Write | None:
        """A write whose answer was lost: when its id is in the record it was applied, and
        `w` is what is left to write; else it is written again, with `w`'s figures if any
        (raises ApiError when the record cannot be read)."""
        cm = self.api.get_config_map(namespace, CONFIG_MAP)
        if cm is not None and lost.id in (cm.data.get(WRITES) or "").split():
            self._counted(lost.counted)
            return w
        if w is None:
            return lost
        for day, seconds in lost.engine.items():
            w.engine[day] = w.engine.get(day, 0.0) + seconds
        for uid, c in lost.candidates.items():
            w.candidates.setdefault(uid, c)
        return w

    def _keep(self, namespace: str, w: Write, *, lost: bool) -> None:
        """Keep `w` for the next flush: as maybe applied (`lost`), else as figures to add."""
        with self._lock:
            if lost:
                self._unsure[namespace] = w
                return
            for day, seconds in w.engine.items():
                self._engine[(namespace, day)] += seconds
            for uid, c in w.candidates.items():
                self._candidates.setdefault(uid, c)

    def _write(self, namespace: str, w: Write) -> None:
        """One update of the record at the version read; a conflict reads again (`TRIES`)."""
        for attempt in range(TRIES):
            cm = self.api.get_config_map(namespace, CONFIG_MAP)
            changes, w.counted = decide(cm.data if cm else {}, w, self.clock.now().date())
            try:
                if cm is None:
                    data = {k: v for k, v in changes.items() if v is not None}
                    self.api.create_config_map(namespace, CONFIG_MAP, data, labels=LABELS)
                else:
                    # A merge patch applied only at the version read (409 otherwise), as PUT is.
                    self.api.patch_config_map(
                        namespace, CONFIG_MAP, changes, resource_version=cm.resource_version
                    )
            except Conflict:
                if attempt == TRIES - 1:
                    raise
                continue
            self._counted(w.counted)
            return

    @staticmethod
    def _counted(counted: list[Candidate]) -> None:
        for c in counted:
            metrics.AUDIO_SECONDS.labels(*c.labels).inc(c.seconds)
