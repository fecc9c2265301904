"""Test helpers: waiting for conditions, building manifests, running `recall` processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from recall.bucket import Bucket
from recall.kube.client import KubeClient
from recall.kube.http import MERGE_PATCH
from recall.resources import API_VERSION, GROUP, VERSION, TranscriptionJob
from recall.worker.holder import LeaseHolder
from recall_dev.cluster import ControlPlane
from recall_dev.crds import install_crds
from recall_dev.procs import die_with_parent

Kube = KubeClient  # the name the tests use for the store on a real API server

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T | bool | None],
    *,
    timeout: float,
    interval: float = 0.1,
    message: str | Callable[[], str] = "condition",
) -> T:
    """Poll `predicate` until it returns something truthy; fail with `message` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() > deadline:
            text = message() if callable(message) else message
            raise AssertionError(f"timed out after {timeout} s waiting for {text}")
        time.sleep(interval)


def job_manifest(
    name: str,
    *,
    url: str = "file:///media/sample.wav",
    lease: int = 5,
    max_attempts: int = 5,
    priority: int = 0,
    simulate: dict[str, Any] | None = None,
    engine: str | None = "simulated",
    labels: dict[str, str] | None = None,
    checkpoint: float | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "source": {"url": url},
        "leaseDurationSeconds": lease,
        "maxAttempts": max_attempts,
        "priority": priority,
    }
    if checkpoint is not None:
        spec["checkpointSeconds"] = checkpoint
    if engine or simulate:
        spec["engine"] = {k: v for k, v in {"name": engine, "simulate": simulate}.items() if v}
    return manifest("TranscriptionJob", name, spec, labels=labels or {})


def manifest(kind: str, name: str, spec: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    """A recall.dev object of `kind` named `name`, with more `metadata` if given."""
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": {"name": name, **metadata},
        "spec": spec,
    }


def admission_job(name: str, fields: dict[str, Any]) -> dict[str, Any]:
    """A job of one file with `fields` in its spec, for what admission accepts or refuses."""
    return manifest("TranscriptionJob", name, {"source": {"url": "file:///media/a.wav"}, **fields})


def admission_batch(name: str, defaults: dict[str, Any]) -> dict[str, Any]:
    """A Batch of one item with `defaults`, for what admission accepts or refuses."""
    item = {"key": "a", "source": {"url": "file:///media/a.wav"}}
    return manifest("Batch", name, {"items": [item], "defaults": defaults})


def create_raw(kube: Kube, namespace: str, plural: str, body: dict[str, Any]) -> dict[str, Any]:
    """Create a recall.dev object as a client would, answering the API server's object."""
    out: dict[str, Any] = kube.custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, plural, body
    )
    return out


def secret(api: client.ApiClient, namespace: str, name: str, data: dict[str, str]) -> None:
    """Create a Secret of string `data`."""
    body = client.V1Secret(metadata=client.V1ObjectMeta(name=name), string_data=data)
    client.CoreV1Api(api).create_namespaced_secret(namespace, body)


def notify_sink(api: client.ApiClient, namespace: str, url: str, key: bytes) -> dict[str, Any]:
    """A sink of `spec.notify` for `url`, signed with `key`: the Secret `recall-notify` that
    holds the key is created in `namespace`."""
    secret(api, namespace, "recall-notify", {"hmac": key.decode()})
    return {"url": url, "secretRef": {"name": "recall-notify", "key": "hmac"}}


def job_event_ids(kube: Kube, namespace: str) -> set[str]:
    """The id of every job's event in `namespace`, each job finished."""
    from recall.operator.notify import events

    ids = set()
    for job in list_jobs(kube, namespace):
        type_ = events.job_type(job)
        assert type_ is not None, f"{job.name} did not finish"
        ids.add(events.event_id(job.metadata.uid or "", type_))
    return ids


def create_job(kube: Kube, namespace: str, name: str, **kwargs: Any) -> TranscriptionJob:
    return kube.create_job(namespace, job_manifest(name, **kwargs))


def get_job(kube: Kube, namespace: str, name: str) -> TranscriptionJob:
    job = kube.get_job(namespace, name)
    assert job is not None, f"job {namespace}/{name} is missing"
    return job


def wait_for_phase(
    kube: Kube, namespace: str, name: str, phase: str, *, timeout: float, procs: Procs
) -> None:
    """Wait until job `name` is in `phase`, through the time it does not exist yet (a Batch's
    items are made by the operator); a time-out shows the tail of every process's log."""
    wait_for(lambda: job_phase(kube, namespace, name) == phase, timeout=timeout, message=procs.dump)


def merge_patch(kube: Kube, namespace: str, plural: str, name: str, body: dict[str, Any]) -> Any:
    """A JSON merge patch of the recall.dev object `name`, as `kubectl patch --type merge`."""
    return kube.custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, plural, name, body, _content_type=MERGE_PATCH
    )


def refused_with(status: int, call: Callable[[], object]) -> bool:
    """Whether the API server refuses `call` with HTTP `status` (False when it passes; any
    other refusal is raised)."""
    try:
        call()
    except ApiException as e:
        if e.status != status:
            raise
        return True
    return False


def list_jobs(kube: Kube, namespace: str) -> list[TranscriptionJob]:
    return [TranscriptionJob.from_api(o) for o in kube.list_jobs(namespace).items]


def read_events(path: Path) -> list[dict[str, Any]]:
    """JSON log lines of a process (non-JSON lines are skipped)."""
    out: list[dict[str, Any]] = []
    if not path.exists():
        return out
    for line in path.read_text(errors="replace").splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def events(self) -> list[dict[str, Any]]:
        return read_events(self.log)

    def event_names(self) -> list[str]:
        return [e.get("event", "") for e in self.events()]

    def signal(self, sig: int) -> None:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, sig)

    def wait(self, timeout: float) -> int:
        return self.popen.wait(timeout=timeout)

    def alive(self) -> bool:
        return self.popen.poll() is None


@dataclass
class Procs:
    """`recall` subprocesses of one test, each logging to its own file."""

    env: dict[str, str]
    logs: Path
    started: list[Proc] = field(default_factory=list)
    worker_env: dict[str, str] = field(default_factory=dict)  # the workers' store identity

    def recall(self, name: str, *args: str, env: dict[str, str] | None = None) -> Proc:
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"{name}.log"
        full_env = {**self.env, **(env or {})}
        with log.open("ab") as out:
            popen = subprocess.Popen(
                [sys.executable, "-m", "recall", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=full_env,
                preexec_fn=die_with_parent,  # an interrupted pytest leaves none behind
            )
        proc = Proc(name, popen, log)
        self.started.append(proc)
        return proc

    def worker(self, name: str, *args: str, env: dict[str, str] | None = None) -> Proc:
        return self.recall(
            name, "worker", "--id", name, *args, env={**self.worker_env, **(env or {})}
        )

    def simulated_worker(
        self, name: str, namespace: str, *args: str, env: dict[str, str] | None = None
    ) -> Proc:
        """A worker of the simulated engine on `namespace`."""
        return self.worker(name, "--engine", "simulated", "--namespace", namespace, *args, env=env)

    def kill_all(self) -> None:
        for p in self.started:
            if p.popen.poll() is None:
                # A stopped process must be continued to die promptly and be reaped.
                for sig in (signal.SIGCONT, signal.SIGKILL):
                    try:
                        os.kill(p.popen.pid, sig)
                    except ProcessLookupError:
                        break
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.popen.wait(timeout=10)

    def dump(self) -> str:
        """The tail of every log, for assertion messages."""
        parts = []
        for p in self.started:
            tail = p.log.read_text(errors="replace").splitlines()[-15:] if p.log.exists() else []
            parts.append(f"--- {p.name} (rc={p.popen.poll()})\n" + "\n".join(tail))
        return "\n".join(parts)


class ControllerThread:
    """The operator's controller (reclaim, reconcile, projection) on one namespace, without
    kopf: an informer feeds its cache, its loop runs in a thread. Batches are read from the
    API each tick. The same code path the operator runs."""

    def __init__(self, kube: Kube, namespace: str, results: Bucket, tick: float = 0.2) -> None:
        import threading

        from recall.base.settings import OperatorSettings
        from recall.kube.informer import Informer, Selection
        from recall.operator.runtime.wiring import wire
        from recall.protocol.workers import SELECTOR

        settings = OperatorSettings(
            namespace=namespace, tick_seconds=tick, reconcile_interval=2, sweep_seconds=2
        )
        self.kube = kube
        self.namespace = namespace
        self.controller = wire(kube, settings, results=results)
        self.controller.leading.set()
        self.informer = Informer(Selection.jobs(kube, namespace), self.controller.cache)
        self.registrations = Informer(
            Selection.leases(kube, namespace, SELECTOR),
            self.controller.registry,
            name="registrations",
        )
        self.reports: list[Any] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self.informer.run, args=(self._stop,), daemon=True),
            threading.Thread(target=self.registrations.run, args=(self._stop,), daemon=True),
            threading.Thread(target=self._run, daemon=True),
            threading.Thread(target=self.controller.results.run, args=(self._stop,), daemon=True),
        ]

    def _run(self) -> None:
        while not self._stop.wait(self.controller.next_wait()):
            for batch in self.kube.list_batches(self.namespace):
                self.controller.put_batch(batch)
            self.reports.extend(self.controller.run_once())

    @property
    def reclaimed(self) -> list[str]:
        return [job for r in self.reports for job, *_ in r.reclaimed]

    def __enter__(self) -> ControllerThread:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=10)


def run_captured(
    args: Sequence[str | Path], *, timeout: float, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    """`args` run to their end, the output captured as text; the exit status is the caller's
    to judge."""
    return subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        **kwargs,
    )


def built(script: Path, *, timeout: float) -> Path:
    """The folder of the tools a hack/*/build.sh builds (or found cached), the last line it
    prints."""
    out = subprocess.run([str(script)], capture_output=True, text=True, timeout=timeout, check=True)
    return Path(out.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def started(cp: ControlPlane) -> Iterator[ControlPlane]:
    """`cp` started, the CRDs installed, and stopped at the end."""
    cp.start(timeout=180)
    try:
        install_crds(str(cp.kubeconfig))
        yield cp
    finally:
        cp.stop()


def process_state(pid: int) -> str:
    """The state letter of a process (R, S, T for stopped, Z ...)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def batch_manifest(
    name: str,
    keys: list[str],
    *,
    lease: int = 5,
    max_attempts: int = 5,
    simulate: dict[str, Any] | None = None,
    suspend: bool = False,
) -> dict[str, Any]:
    defaults: dict[str, Any] = {"leaseDurationSeconds": lease, "maxAttempts": max_attempts}
    if simulate is not None:
        defaults["engine"] = {"name": "simulated", "simulate": simulate}
    items = [{"key": k, "source": {"url": f"file:///media/{k}.wav"}} for k in keys]
    return manifest("Batch", name, {"items": items, "defaults": defaults, "suspend": suspend})


def create_batch(kube: Kube, namespace: str, name: str, keys: list[str], **kwargs: Any) -> None:
    from recall.resources import BATCH_PLURAL

    kube.custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, BATCH_PLURAL, batch_manifest(name, keys, **kwargs)
    )


def get_batch(kube: Kube, namespace: str, name: str) -> Any:
    batch = kube.get_batch(namespace, name)
    assert batch is not None, f"batch {namespace}/{name} is missing"
    return batch


def item_phases(batch: Any) -> dict[str, Any]:
    """Every inline item's phase, as the Batch status records it (compressed ranges)."""
    from recall.operator.reconcile.project import CODES, stored_phases

    codes = stored_phases(batch.status, len(batch.spec.items))
    return {item.key: CODES[codes[i]] for i, item in enumerate(batch.spec.items)}


def item_phase(kube: Kube, namespace: str, batch: str, key: str) -> str | None:
    """The item's phase in the Batch status (None before the operator wrote any status)."""
    b = get_batch(kube, namespace, batch)
    if b.status.counts is None:
        return None
    return item_phases(b).get(key)


def events(kube: Kube, namespace: str, reason: str | None = None) -> list[Any]:
    out = kube.core.list_namespaced_event(namespace).items
    return [e for e in out if reason is None or e.reason == reason]


def http_get(url: str) -> tuple[int, str]:
    """The status and body of a GET of `url`; (0, "") while nothing answers there."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


def get_json(url: str) -> tuple[int, dict[str, Any]]:
    """The status and JSON body of a GET of `url`; (0, {}) while nothing answers there."""
    status, body = http_get(url)
    return status, json.loads(body) if status else {}


def readyz(port: int) -> tuple[int, str]:
    """A local process's /readyz: its status and body."""
    return http_get(f"http://127.0.0.1:{port}/readyz")


def metric(port: int, name: str) -> float:
    """Sum of a Prometheus metric's samples (all labels) from a process's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            head, _, value = line.rpartition(" ")
            if head == name or head.startswith(name + "{"):
                total += float(value)
    return total


def job_phase(kube: Kube, namespace: str, name: str) -> str | None:
    """The job's phase, or None while it does not exist (yet)."""
    job = kube.get_job(namespace, name)
    return job.status.effective_phase if job else None


def store_keys(results: Bucket, namespace: str, job: TranscriptionJob | None = None) -> list[str]:
    """Every key the results store holds for `job` (all jobs of `namespace` without one)."""
    from recall.transcripts import job_prefix, namespace_prefix

    prefix = (
        job_prefix(namespace, job.name, job.metadata.uid or "")
        if job is not None
        else namespace_prefix(namespace)
    )
    return sorted(o.key for o in results.list(prefix))


def wait_for_the_result_alone(
    results: Bucket, namespace: str, job: TranscriptionJob, *, attempt: int, timeout: float
) -> str:
    """`job`'s accepted transcript, written by attempt `attempt`, once the store holds nothing
    else of the job (every other attempt's chunks and cuttings collected)."""
    assert job.status.result is not None
    accepted = job.status.result.transcript
    assert f"/a{attempt}-{job.status.result.token}/" in accepted
    wait_for(
        lambda: store_keys(results, namespace, job) == [accepted],
        timeout=timeout,
        message=lambda: f"only {accepted} to stay: {store_keys(results, namespace, job)}",
    )
    return accepted


def complete_with_transcript(holder: LeaseHolder, results: Bucket, text: str = "done") -> None:
    """Complete `holder`'s job as a worker would: its transcript written first, then the
    fenced complete naming it."""
    from recall.media.types import Segment
    from recall.resources import Result
    from recall.transcripts import Transcript, directory_of, transcript_key

    job = holder.known
    key = transcript_key(directory_of(job, holder.attempt, holder.token))
    segments = [Segment(start=0.0, end=1.0, text=text)]
    body = Transcript(segments=segments, duration=1.0, engine="test", job=job.name)
    results.put(key, body.encode())
    holder.complete(Result(transcript=key, worker=holder.worker, words=len(text.split())))
