"""The operator's side of the results store: publish accepted results; run the collector.

    results = Results(store, bucket, stores, cache, leading=..., batches=...)
    results.run_once()          # what one pass does; tests call it directly
    results.run(stop)           # its own thread: store calls never hold the controller's tick

**Publish** (the second record, DESIGN §4b). For each Succeeded job not yet published: copy its
accepted transcript into its Batch's results index (`index/<ns>/<batch>/<uid>/<item>.json`) and
each rendered output format to the job's `spec.output` URL (server-side within one store,
streamed across stores), then record `status.published` with one fenced write, the one write a
Succeeded job accepts. Every step is idempotent: a crash before the record is healed by doing
them again (the cache still lists the job as unpublished), so outputs are written for the
accepted result only, and at least once. A store that delays is retried with backoff, one that
refuses every `RETRY_REFUSED` seconds (a fixed permission is picked up); the Batch shows
`StorageFailing` meanwhile.

**Collect** (invariant 8): `collector.Collector`, on the same thread, after the publishes.

Only the leader publishes and collects; a standby keeps nothing but its cache. Errors never
leave `run_once`: they are counted, logged and retried.

**Reachability** (the operator's readiness): `reachable` is None while the store answers, else
why not. The probe (a write of `index/.probe`) runs at start, every `probe_every` seconds
(leader or standby), and with backoff (`PROBE_RETRY`) while the store is unreachable, so a
store that comes up late, or comes back on an empty volume, makes the operator ready without a
restart. A refused sweep is retried with the same backoff.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import KW_ONLY, dataclass, field

from recall.base import faults, log, metrics
from recall.base.backoff import Backoff
from recall.base.clock import SYSTEM, Clock
from recall.bucket import Bucket, Location, StoreError, Stores, StoreUnavailable
from recall.fencing import fenced_write
from recall.kube import Api, ApiError, ObjectRef
from recall.operator.reconcile.cache import JobCache
from recall.operator.reconcile.record import BatchKey, JobRecord
from recall.operator.results.collect import Collector
from recall.protocol import lease
from recall.resources import Batch, Phase, Published, TranscriptionJob
from recall.transcripts import (
    index_key,
    output_formats,
    output_key,
    output_url,
)
from recall.transcripts.layout import INDEX, REDACTED_AUDIO

_log = log.get("results")
PUBLISH_PER_PASS = 64
RETRY_TRANSIENT = Backoff(initial=1.0, cap=30.0)  # a publish the store delayed
RETRY_REFUSED = 300.0  # a publish the store refused is tried again this often
PROBE_KEY = f"{INDEX}/.probe"
PROBE_RETRY = Backoff(initial=1.0, cap=30.0)  # between probes while the store is unreachable


def unreachable(error: StoreError) -> str:
    """Why the store cannot be reached, as readiness says it: the reason, then the message."""
    return f"{error.reason}: {error.message}"


@dataclass
class Pass:
    """What one pass did."""

    published: int = 0
    publish_errors: int = 0
    deleted: int = 0
    swept: bool = False
    errors: list[str] = field(default_factory=list)


@dataclass
class Probes:
    """When the operator probes the store (**Reachability** in the module doc): a standby says
    whether it could take over, an idle leader whether its store still answers."""

    every: float
    next: float = float("-inf")
    failures: int = 0  # probes failed in a row
    failing: bool = False  # the last probe failed

    def due(self, mono: float, *, reachable: str | None) -> bool:
        if reachable is not None and not self.failing:
            return True  # a pass found the store unreachable: probe now, then back off
        return mono >= self.next

    def done(self, mono: float, failed: str | None) -> None:
        self.failing = failed is not None
        if failed is None:
            self.next, self.failures = mono + self.every, 0
        else:
            self.next = mono + min(PROBE_RETRY.delay(self.failures), self.every)
            self.failures += 1


@dataclass
class Retry:
    at: float
    reason: str
    retries: int = 0  # transient failures in a row before this one


@dataclass(eq=False)
class Results:
    """Publishes accepted results and deletes what nothing references; see the module doc."""

    store: Api
    bucket: Bucket
    stores: Stores
    cache: JobCache
    _: KW_ONLY
    leading: threading.Event
    batches: Callable[[], dict[BatchKey, Batch]]
    clock: Clock = SYSTEM
    sweep_seconds: float = 600.0
    threads: int = 4

    def __post_init__(self) -> None:
        self.collector = Collector(self.store, self.bucket, self.cache, batches=self.batches)
        self._retry: dict[tuple[str, str], Retry] = {}
        self._failing: dict[BatchKey, tuple[str, str]] = {}
        self._last_sweep = float("-inf")
        self._sweep_after = float("-inf")  # a refused sweep waits until then
        self._sweep_failures = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self.reachable: str | None = None  # why the store cannot be reached, None when it can

    # -- inputs ------------------------------------------------------------------------------

    def wake(self) -> None:
        self._wake.set()

    def forget_batch(self, namespace: str, name: str, uid: str) -> None:
        """A deleted Batch: its results index goes at the next pass (its outputs stay)."""
        self.collector.forget_batch(namespace, name, uid)
        self._wake.set()

    def storage_error(self, batch: BatchKey) -> tuple[str, str] | None:
        """The store's last refusal of a publish for `batch` (reason, message), if any."""
        with self._lock:
            return self._failing.get(batch)

    # -- the loop ----------------------------------------------------------------------------

    def run(self, stop: threading.Event, period: float = 0.5, probe_every: float = 30.0) -> None:
        probes = Probes(probe_every)
        with ThreadPoolExecutor(self.threads, thread_name_prefix="publish") as pool:
            while not stop.is_set():
                try:
                    mono = self.clock.monotonic()
                    if probes.due(mono, reachable=self.reachable):
                        probes.done(mono, self.probe())
                    self.run_once(pool)
                except Exception:
                    _log.exception("results_pass_failed")
                self.clock.wait(self._wake, period)
                self._wake.clear()

    def probe(self) -> str | None:
        """Write the operator's probe object (`index/.probe`: the operator may write there, and
        a store that creates buckets on first write creates the bucket now); returns (and keeps
        in `reachable`) why it failed, or None."""
        try:
            self.bucket.put(PROBE_KEY, b"recall operator", once=False)
        except StoreError as e:
            if self.reachable is None:
                _log.warning("store_unreachable", reason=e.reason, error=e.message[:300])
            self.reachable = unreachable(e)
            return self.reachable
        if self.reachable is not None:
            _log.info("store_reachable")
        self.reachable = None
        return None

    def run_once(self, pool: ThreadPoolExecutor | None = None) -> Pass:
        """One pass: publish, collect, and sweep when due. Never raises for the store."""
        done = Pass()
        if not self.leading.is_set() or not self.cache.synced.is_set():
            return done
        mono = self.clock.monotonic()
        due = self.cache.take_publish(PUBLISH_PER_PASS, self._waiting(mono))
        outcomes = list(pool.map(self.publish, due)) if pool else [self.publish(k) for k in due]
        done.published = sum(1 for o in outcomes if o)
        done.publish_errors = sum(1 for o in outcomes if not o)
        try:
            done.deleted += self.collector.collect()
            if mono >= self._sweep_after and mono - self._last_sweep >= self.sweep_seconds:
                done.deleted += self.collector.sweep()
                self._last_sweep = mono
                done.swept = True
                self.reachable = None  # the sweep lists the whole bucket: it answers
                self._sweep_failures = 0
        except StoreError as e:
            self.reachable = unreachable(e)
            done.errors.append(e.message)
            # Not at every pass: a store that is still starting is asked again with backoff.
            self._sweep_after = mono + PROBE_RETRY.delay(self._sweep_failures)
            self._sweep_failures += 1
            _log.warning("collect_failed", reason=e.reason, error=e.message[:300])
        except ApiError as e:
            done.errors.append(e.message)
            _log.warning("collect_failed", error=e.message[:300])
        return done

    def _waiting(self, mono: float) -> set[tuple[str, str]]:
        with self._lock:
            return {k for k, r in self._retry.items() if r.at > mono}

    # -- publish -----------------------------------------------------------------------------

    def publish(self, key: tuple[str, str]) -> bool:
        """Publish one job's accepted result; True when its record is written (or it needs
        none any more: gone, not Succeeded, published meanwhile)."""
        try:
            job = self.store.get_job(*key)
            if job is None or job.status.effective_phase is not Phase.SUCCEEDED:
                return True
            if job.status.published is not None or job.status.result is None:
                return True
            record = self._publish(job)
        except StoreError as e:
            self._failed(key, e)
            return False
        except ApiError as e:
            self._later(key, e.message, transient=True)
            return False
        with self._lock:
            self._retry.pop(key, None)
        if record:
            metrics.PUBLISHES.labels(outcome="published").inc()
        self._clear_failing(key)
        return True

    def _publish(self, job: TranscriptionJob) -> bool:
        assert job.status.result is not None
        transcript = job.status.result.transcript
        directory = transcript.rsplit("/", 1)[0] + "/"
        index = None
        spec = job.spec
        if spec.batch_ref and spec.item:
            batch = self.batches().get((job.namespace, spec.batch_ref))
            if batch is None:
                batch = self.store.get_batch(job.namespace, spec.batch_ref)
            if batch is not None and batch.metadata.uid:
                index = index_key(job.namespace, batch.name, batch.metadata.uid, spec.item)
                self.bucket.copy_to(transcript, self.bucket, index)
                metrics.STORE_OPERATIONS.labels(operation="copy").inc()
        formats = output_formats(job)
        for fmt in formats:
            assert spec.output is not None
            target, name = self._object(output_url(spec.output, fmt, job))
            self.bucket.copy_to(output_key(directory, fmt), target, name)
            metrics.STORE_OPERATIONS.labels(operation="copy").inc()
        audio = self._publish_audio(job, directory)
        faults.hit("operator-after-publish", job=job.name)
        now = self.clock.now()
        published = Published(time=now, formats=formats, index=index, audio=audio)
        result = fenced_write(
            self.store,
            job.namespace,
            job.name,
            lambda j: lease.publish(j.status, now, published=published),
            action="publish",
        )
        if result.applied:
            _log.info("published", job=job.name, namespace=job.namespace, formats=formats)
        return result.applied

    def _publish_audio(self, job: TranscriptionJob, directory: str) -> str | None:
        """With `redact.audio`, copy the audio with the redacted spans silenced beside the
        outputs (`{key}.redacted.wav`); its URL, or None when there is none."""
        t, output = job.spec.transcript, job.spec.output
        if output is None or t is None or t.redact is None or not t.redact.audio:
            return None
        key = output_key(directory, REDACTED_AUDIO)
        if not self.bucket.exists(key):
            return None
        url = output_url(output, "json", job).removesuffix(".json") + "." + REDACTED_AUDIO
        target, name = self._object(url)
        self.bucket.copy_to(key, target, name)
        metrics.STORE_OPERATIONS.labels(operation="copy").inc()
        return url

    def _object(self, url: str) -> tuple[Bucket, str]:
        """The bucket of an output URL's folder and the object's key in it, percent-decoded
        as every store URL is (`recall.bucket.Location`)."""
        folder, name = Location.parse(url).split()
        return self.stores.open(folder.url()), name

    def _failed(self, key: tuple[str, str], error: StoreError) -> None:
        transient = isinstance(error, StoreUnavailable)
        metrics.PUBLISHES.labels(outcome=error.reason).inc()
        self._later(key, error.message, transient=transient, reason=error.reason)
        if transient:
            return
        record = self.cache.get(key)
        if record is None:
            return
        if record.batch_key is not None:
            with self._lock:
                first = self._failing.get(record.batch_key, ("", ""))[0] != error.reason
                self._failing[record.batch_key] = (error.reason, error.message)
            if first:
                self._reproject(record)
                about = ObjectRef("Batch", record.namespace, record.batch or "")
                self._event(about, error.reason, f"publishing {record.name}: {error.message}")
        self._event(
            ObjectRef("TranscriptionJob", record.namespace, record.name, record.uid),
            error.reason,
            f"publishing the result: {error.message}",
        )

    def _later(
        self, key: tuple[str, str], message: str, *, transient: bool, reason: str = ""
    ) -> None:
        mono = self.clock.monotonic()
        with self._lock:
            old = self._retry.get(key)
            if transient:
                retries = old.retries + 1 if old else 0
                delay = RETRY_TRANSIENT.delay(retries)
            else:
                retries, delay = 0, RETRY_REFUSED
            self._retry[key] = Retry(mono + delay, reason or "Unavailable", retries)
        _log.warning("publish_failed", job=key[1], namespace=key[0], retry_in=delay, error=message)

    def _clear_failing(self, key: tuple[str, str]) -> None:
        record = self.cache.get(key)
        if record is None or record.batch_key is None:
            return
        with self._lock:
            if record.batch_key not in self._failing:
                return
            still = any(
                (r := self.cache.get(k)) is not None and r.batch_key == record.batch_key
                for k, retry in self._retry.items()
                if retry.reason.startswith("Storage") and retry.reason != "StorageUnavailable"
            )
            if not still:
                del self._failing[record.batch_key]
        self._reproject(record)

    def _reproject(self, record: JobRecord) -> None:
        """Have the controller project `record`'s Batch again (its StorageFailing changed)."""
        if record.batch_key is not None and record.index is not None:
            self.cache.marks.mark(record.batch_key, record.index, moved=False)

    def _event(self, about: ObjectRef, reason: str, message: str) -> None:
        with contextlib.suppress(ApiError):
            self.store.post_event(about, "Warning", reason, message[:1000])
