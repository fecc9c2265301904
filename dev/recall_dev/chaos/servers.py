"""Restarts of the servers during a chaos run (etcd, kube-apiserver, the S3 server): when
(`restart_schedule`, fixed points spread over the fault phase), how (`ServerKeeper`, on a
thread of its own) and how the run knows the API server is back (`servers_ready`,
`writable`)."""

from __future__ import annotations

import json
import queue
import random
import signal
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from recall_dev.chaos.workload import Profile
from recall_dev.cluster import ControlPlane

STORE_SERVER = "s3"  # the object store's name in the restart schedule


class ServerKeeper:
    """Restarts servers on its own thread, one at a time, and notes when each is back, so that
    the run's loop never waits for a server: `restart(name, sig)` does the restart, `back(name,
    detail)` says whether it is back (and may note stages of its return in `detail`).

    The servers it starts die with the thread that started them (PR_SET_PDEATHSIG is per
    thread), so this thread lives until they are stopped: `close()` after stopping them.
    """

    def __init__(
        self,
        restart: Callable[[str, signal.Signals], None],
        back: Callable[[str, dict[str, Any]], bool],
        name: str = "chaos-servers",
    ) -> None:
        self._restart = restart
        self._back = back
        self._requests: queue.Queue[tuple[str, signal.Signals, dict[str, Any]] | None] = (
            queue.Queue()
        )
        self._busy = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        return self._busy.is_set()

    def restart(self, name: str, sig: signal.Signals, detail: dict[str, Any]) -> None:
        """Restart `name` with `sig`; `detail["ready"]` is set (wall time) once it is back."""
        self._busy.set()
        self._requests.put((name, sig, detail))

    def close(self) -> None:
        self._requests.put(None)
        self._thread.join(timeout=60)

    def _run(self) -> None:
        while (request := self._requests.get()) is not None:
            name, sig, detail = request
            try:
                self._restart(name, sig)
                started = time.time()
                while time.time() - started < 120:
                    time.sleep(0.25)
                    if time.time() - started > 0.5 and self._back(name, detail):
                        detail["ready"] = time.time()
                        break
            except Exception as e:  # reported in the run's line as a restart never ready
                detail["error"] = str(e)[:300]
            finally:
                self._busy.clear()


def restart_schedule(
    profile: Profile, rng: random.Random, started: float
) -> list[tuple[float, str]]:
    """When to restart which server (wall time, name: etcd, kube-apiserver or s3), in order:
    spread evenly over the first 4/5 of the fault phase, each moved by up to 2 s."""
    p = profile
    names = ["etcd"] * p.etcd_restarts + ["kube-apiserver"] * p.apiserver_restarts
    names += [STORE_SERVER] * p.store_restarts
    rng.shuffle(names)
    span = p.duration * 0.8
    return [
        (started + span * (i + 0.5) / len(names) + rng.uniform(-2, 2), name)
        for i, name in enumerate(names)
    ]


def servers_ready(cp: ControlPlane) -> bool:
    """etcd healthy and kube-apiserver ready."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{cp.etcd_port}/health", timeout=1) as r:
            if json.loads(r.read()).get("health") != "true":
                return False
    except (OSError, ValueError):
        return False
    return cp.ready()


def writable(api: client.ApiClient, namespace: str) -> bool:
    """Whether the API server takes a write (a ConfigMap of the run's own) right now."""
    core = client.CoreV1Api(api)
    body = {"metadata": {"name": "chaos-probe"}, "data": {"t": str(time.time())}}
    try:
        try:
            core.patch_namespaced_config_map("chaos-probe", namespace, body, _request_timeout=1)
        except ApiException as e:
            if e.status != 404:
                return False
            core.create_namespaced_config_map(namespace, body, _request_timeout=1)
    except Exception:
        return False
    return True
