"""What each team used: audio and engine seconds per namespace, as counters and a lasting record.

    usage = Usage(api, cache, leading=..., clock=clock)   # a listener of the job cache
    usage.run(stop)                                     # flushes the record every `every` s

The leader counts, from the job changes its cache sees:
- **engine seconds** when an attempt ends (its lease goes: completed, failed, released or
  reclaimed): from the lease's acquireTime to the job's completedAt when it ended the job, else
  to the lease's last renewal. Failed and abandoned attempts count: they cost.
- **audio seconds** when a Succeeded job's result is published (a record only the operator
  writes, so a job that finished while no operator ran is counted too): the result's duration
  times its channels (a file split into channels counts each channel's seconds).

Both go to the Prometheus counters `recall_audio_seconds_total` and
`recall_engine_seconds_total` by namespace, pool and engine, and to each namespace's ConfigMap
`recall-usage`, one key per UTC day (`{"jobs", "audioSeconds", "engineSeconds"}`), which
outlives the jobs' TTL and Prometheus' retention (`recall usage`). The ConfigMap is written at
most every `every` seconds per namespace; what a killed operator had not written yet (at most
that long) is lost, and an attempt that ended while no operator led is not counted.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict

from recall.base import log, metrics
from recall.base.clock import SYSTEM, Clock
from recall.kube import Api, ApiError, NotFound
from recall.operator.reconcile.cache import JobCache
from recall.operator.reconcile.record import JobRecord
from recall.resources import Phase

_log = log.get("usage")
CONFIG_MAP = "recall-usage"
LABELS = {"app.kubernetes.io/name": "recall", "app.kubernetes.io/component": "usage"}

Day = tuple[str, str]  # (namespace, YYYY-MM-DD)


def _zero() -> dict[str, float]:
    return {"jobs": 0.0, "audioSeconds": 0.0, "engineSeconds": 0.0}


def attempt_seconds(old: JobRecord, new: JobRecord | None) -> float | None:
    """The engine seconds of the attempt that ended between `old` and `new` (pure), or None
    when no attempt ended."""
    lease = old.lease
    if lease is None:
        return None
    if new is not None and new.lease is not None and new.lease.token == lease.token:
        return None
    end = lease.renew_time
    if new is not None and new.phase.terminal and new.completed_at is not None:
        end = max(end, new.completed_at)
    return max(0.0, (end - lease.acquire_time).total_seconds())


def published_audio(old: JobRecord | None, new: JobRecord | None) -> float | None:
    """The audio seconds of a result published between `old` and `new` (pure)."""
    if new is None or new.phase is not Phase.SUCCEEDED or not new.published:
        return None
    if old is not None and old.published:
        return None
    return new.audio_seconds


class Usage:
    """Counts usage from the job cache's changes; see the module doc."""

    def __init__(
        self, api: Api, cache: JobCache, *, leading: threading.Event, clock: Clock = SYSTEM
    ) -> None:
        self.api = api
        self.leading = leading
        self.clock = clock
        self._lock = threading.Lock()
        self._pending: defaultdict[Day, dict[str, float]] = defaultdict(_zero)
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
        audio = published_audio(old, new)
        if engine is None and audio is None:
            return
        with self._lock:
            figures = self._pending[(record.namespace, day.isoformat())]
            if engine is not None:
                metrics.ENGINE_SECONDS.labels(*labels).inc(engine)
                figures["engineSeconds"] += engine
            if audio is not None:
                metrics.AUDIO_SECONDS.labels(*labels).inc(audio)
                figures["audioSeconds"] += audio
                figures["jobs"] += 1

    def run(self, stop: threading.Event, every: float = 30.0) -> None:
        while not self.clock.wait(stop, every):
            self.flush()
        self.flush()

    def flush(self) -> int:
        """Add what was counted to each namespace's ConfigMap; how many namespaces were
        written. What could not be written is kept for the next flush."""
        with self._lock:
            pending, self._pending = self._pending, defaultdict(_zero)
        by_namespace: defaultdict[str, dict[str, dict[str, float]]] = defaultdict(dict)
        for (namespace, day), figures in pending.items():
            by_namespace[namespace][day] = figures
        written = 0
        for namespace, days in by_namespace.items():
            try:
                self._write(namespace, days)
                written += 1
            except ApiError as e:
                _log.warning("usage_write_failed", namespace=namespace, error=e.message[:200])
                with self._lock:
                    for day, figures in days.items():
                        kept = self._pending[(namespace, day)]
                        for k, v in figures.items():
                            kept[k] += v
        return written

    def _write(self, namespace: str, days: dict[str, dict[str, float]]) -> None:
        cm = self.api.get_config_map(namespace, CONFIG_MAP)
        data = dict(cm.data) if cm is not None else {}
        for day, figures in days.items():
            try:
                stored = json.loads(data.get(day) or "{}")
            except ValueError:
                stored = {}
            merged = {k: round(float(stored.get(k, 0)) + v, 3) for k, v in figures.items()}
            merged["jobs"] = int(merged["jobs"])
            data[day] = json.dumps(merged, sort_keys=True)
        if cm is None:
            self.api.create_config_map(namespace, CONFIG_MAP, data, labels=LABELS)
        else:
            try:
                self.api.patch_config_map(namespace, CONFIG_MAP, {d: data[d] for d in days})
            except NotFound:
                self.api.create_config_map(namespace, CONFIG_MAP, data, labels=LABELS)
