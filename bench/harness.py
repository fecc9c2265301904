"""What every recall benchmark stands on: a local control plane, `recall` processes, the API
server's own request counts, and the resources a process used.

    with environment() as env:
        ns = env.namespace()
        env.operator(ns)
        env.workers(ns, 16)
        counts = env.api_counts()     # apiserver_request_total, by (verb, resource, subresource)

Everything started is stopped (and the control plane's directory removed) when the `with`
block ends, also on an exception or KeyboardInterrupt.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

from recall.base.settings import StoreSettings
from recall.bucket import Bucket, Stores
from recall.kube.client import KubeClient, load_api_client
from recall.resources import API_VERSION, TranscriptionJob
from recall_dev.cluster import ControlPlane, free_port
from recall_dev.crds import install_crds
from recall_dev.objstore import ObjectStore
from recall_dev.procs import die_with_parent

RequestKey = tuple[str, str, str]  # (verb, resource, subresource)
_REQUEST = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")


def parse_request_counts(text: str) -> Counter[RequestKey]:
    """`apiserver_request_total` of a /metrics page, summed over codes and scopes."""
    out: Counter[RequestKey] = Counter()
    for line in text.splitlines():
        m = _REQUEST.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group("labels")))
        key = (labels.get("verb", ""), labels.get("resource", ""), labels.get("subresource", ""))
        out[key] += int(float(m.group("value")))
    return out


@dataclass
class Usage:
    """A process's CPU seconds and peak resident memory (from /proc), read while it runs."""

    cpu_seconds: float
    rss_mib: float
    peak_rss_mib: float


def usage(pid: int) -> Usage:
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(stat[11]) + int(stat[12])) / ticks
    fields = dict(
        line.split(":", 1)
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if ":" in line
    )

    def kib(name: str) -> int:
        return int(fields.get(name, "0 kB").split()[0])

    return Usage(round(cpu, 2), round(kib("VmRSS") / 1024, 1), round(kib("VmHWM") / 1024, 1))


@dataclass
class Env:
    cp: ControlPlane
    workdir: Path
    store: KubeClient
    objects: ObjectStore
    results: Bucket
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def store_env(self, worker: bool = False) -> dict[str, str]:
        """The results store's variables: the operator's identity, or the workers'."""
        creds = self.objects.worker if worker else self.objects.admin
        return self.objects.env(creds) | {"RECALL_STORE_URL": self.results.url}

    def namespace(self) -> str:
        name = f"b-{uuid.uuid4().hex[:6]}"
        client.CoreV1Api(self.store.api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=name))
        )
        return name

    def recall(self, name: str, *args: str, env: dict[str, str] | None = None) -> int:
        """Start `recall <args>` as `name`, logging JSON to workdir/<name>.log; its pid."""
        log = self.workdir / f"{name}.log"
        worker = len(args) > 0 and args[0] == "worker"
        full = self.cp.env() | self.store_env(worker) | {"RECALL_LOG_FORMAT": "json"} | (env or {})
        with log.open("ab") as out:
            p = subprocess.Popen(
                [sys.executable, "-m", "recall", *args],
                env=full,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=die_with_parent,  # a bench stopped by a signal leaves none behind
            )
        self.procs[name] = p
        return p.pid

    def service_accounts(self, namespace: str, release: str = "bench") -> dict[str, Path]:
        """Kubeconfigs of the chart's operator and worker ServiceAccounts in `namespace`, by
        component, and the chart's API Priority and Fairness objects that match them: recall's
        requests as a cluster sees them (an admin is exempt from APF). Both are bound to
        cluster-admin: RBAC is not what a benchmark measures."""
        from recall_dev import identities

        api = self.store.api
        out: dict[str, Path] = {}
        for component in ("operator", "worker"):
            sa = f"{release}-recall-{component}"
            path = self.workdir / f"{namespace}-{component}.kubeconfig"
            out[component] = identities.service_account_kubeconfig(
                api, self.cp, namespace, sa, path
            )
            identities.bind_cluster_role(api, namespace, sa, "cluster-admin")
        identities.install_apf(api, identities.chart_apf(release, namespace))
        return out

    def operator(
        self,
        namespace: str,
        name: str = "operator",
        *,
        kubeconfig: Path | str | None = None,
        **env: str,
    ) -> int:
        """The operator of `namespace` (as `kubeconfig`'s identity, else the admin); returns
        its metrics port."""
        port = free_port()
        self.recall(
            name,
            "operator",
            "--namespace",
            namespace,
            "--metrics-port",
            str(port),
            env={f"RECALL_OPERATOR_{k.upper()}": v for k, v in env.items()} | _identity(kubeconfig),
        )
        return port

    def workers(
        self,
        namespace: str,
        n: int,
        *,
        prefix: str = "w",
        idle_exit: float = 5,
        kubeconfig: Path | str | None = None,
        **env: str,
    ) -> list[str]:
        names = [f"{prefix}{i}" for i in range(n)]
        for name in names:
            self.recall(
                name,
                "worker",
                "--id",
                name,
                "--engine",
                "simulated",
                "--namespace",
                namespace,
                "--idle-exit",
                str(idle_exit),
                env={f"RECALL_WORKER_{k.upper()}": v for k, v in env.items()}
                | _identity(kubeconfig),
            )
        return names

    def events(self, name: str) -> list[dict[str, Any]]:
        log = self.workdir / f"{name}.log"
        out = []
        for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    out.append(json.loads(line))
        return out

    def wait_exit(self, names: list[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for name in names:
            left = max(0.1, deadline - time.monotonic())
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.procs[name].wait(timeout=left)

    def stop(self, names: list[str] | None = None) -> None:
        chosen = [self.procs[n] for n in (names or list(self.procs))]
        for p in chosen:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGCONT)
                    p.terminate()
        for p in chosen:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def api_counts(self) -> Counter[RequestKey]:
        return parse_request_counts(self.cp.get_raw("/metrics", timeout=30))

    def jobs(self, namespace: str) -> list[TranscriptionJob]:
        out: list[TranscriptionJob] = []
        page = self.store.list_jobs(namespace, limit=1000)
        out += [TranscriptionJob.from_api(o) for o in page.items]
        while page.next:
            page = self.store.list_jobs(namespace, limit=1000, continue_from=page.next)
            out += [TranscriptionJob.from_api(o) for o in page.items]
        return out


def _identity(kubeconfig: Path | str | None) -> dict[str, str]:
    return {} if kubeconfig is None else {"KUBECONFIG": str(kubeconfig)}


@contextlib.contextmanager
def environment() -> Iterator[Env]:
    """A control plane and a results store (SeaweedFS, bucket `bench`), both on loopback."""
    with tempfile.TemporaryDirectory(prefix="recall-bench-") as tmp:
        cp = ControlPlane(workdir=Path(tmp) / "cluster")
        cp.start(timeout=180)
        objects = ObjectStore(Path(tmp) / "objects", buckets=("bench",))
        try:
            objects.start()
            os.environ.update(objects.env())  # the in-process clients read the same variables
            results = Stores(StoreSettings(url="s3://bench/")).results()
            store = KubeClient(load_api_client(cp.kubeconfig, pool_size=64))
            env = Env(cp, Path(tmp), store, objects, results)
            try:
                install_crds(str(cp.kubeconfig))
                yield env
            finally:
                env.stop()
        finally:
            objects.stop()
            cp.stop()


def wait(predicate: Callable[[], Any], timeout: float, what: str, every: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} (after {timeout:.0f} s)")
        time.sleep(every)


def simulated_batch(
    name: str, keys: int, *, lease: int = 30, chunks: int = 1, delay: float = 0.0, **defaults: Any
) -> dict[str, Any]:
    """A Batch of `keys` simulated items inline (at most 1000) with these job defaults."""
    return {
        "apiVersion": API_VERSION,
        "kind": "Batch",
        "metadata": {"name": name},
        "spec": {
            "items": [
                {"key": f"i{i:05d}", "source": {"url": f"file:///bench/{i}.wav"}}
                for i in range(keys)
            ],
            "defaults": {
                "leaseDurationSeconds": lease,
                "engine": {
                    "name": "simulated",
                    "simulate": {"chunks": chunks, "chunkDelaySeconds": delay},
                },
                **defaults,
            },
        },
    }


def list_batch(
    env: Env,
    namespace: str,
    name: str,
    items: int,
    *,
    lease: int = 30,
    chunks: int = 1,
    delay: float = 0.0,
) -> None:
    """A Batch of `items` simulated items from item lists in ConfigMaps (any size)."""
    from recall.cli.submission import Media, submission_for, submit_to

    media = [Media(key=f"{i:06d}", url=f"file:///bench/{i}.wav") for i in range(items)]
    plan = submission_for(media, name=name, engine="simulated", lease_seconds=lease)
    plan.batch["spec"]["defaults"]["engine"]["simulate"] = {
        "chunks": chunks,
        "chunkDelaySeconds": delay,
    }
    submit_to(env.store, namespace, plan)
