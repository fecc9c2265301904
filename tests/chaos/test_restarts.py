"""Restarts of etcd and kube-apiserver under a running informer, on a control plane of its own.

Found by the chaos run: after kube-apiserver restarts, a watch from the last resourceVersion is
answered with 410 Gone (the new server's watch cache starts later). The informer must list again
at once; before the fix the 410 was taken for a transient error and the watch was retried from
the same version forever, so the operator's and the workers' views froze.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from recall.kube import Selector
from recall.kube.client import KubeClient, load_api_client
from recall.kube.informer import Informer, Selection
from recall_dev.cluster import ControlPlane
from tests.helpers import create_job, started, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def own_control_plane() -> Iterator[ControlPlane]:
    """A control plane this module may restart (the session's one is shared)."""
    with started(ControlPlane(controller_manager=False)) as cp:
        yield cp


class Names:
    """An informer consumer: the names it currently holds, and how often it listed."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.lists = 0
        self.lock = threading.Lock()

    def relisted(self, items: Iterator[dict[str, Any]]) -> None:
        names = {o["metadata"]["name"] for o in items}
        with self.lock:
            self.names = names
            self.lists += 1

    def changed(self, type_: str, obj: dict[str, Any]) -> None:
        with self.lock:
            if type_ == "DELETED":
                self.names.discard(obj["metadata"]["name"])
            else:
                self.names.add(obj["metadata"]["name"])


@pytest.mark.parametrize("server", ["kube-apiserver", "etcd"])
def test_informer__sees_new_jobs_after_a_server_restart(
    own_control_plane: ControlPlane, server: str
) -> None:
    cp = own_control_plane
    kube = KubeClient(load_api_client(cp.kubeconfig), timeout=5)
    namespace = f"restart-{server}"
    kube.core.create_namespace({"metadata": {"name": namespace}})
    names = Names()
    informer = Informer(Selection.jobs(kube, namespace, Selector()), names, name="test-informer")
    informer.start()
    try:
        create_job(kube, namespace, "before")
        wait_for(lambda: "before" in names.names, timeout=10, message="the first job")
        cp.restart(server, sig=signal.SIGKILL)
        # etcd: /readyz may answer ok before the API server noticed; give it a moment
        time.sleep(2)
        cp.wait_ready(60)
        wait_for(
            lambda: _create(kube, namespace, "after"),
            timeout=30,
            interval=0.5,
            message="the API server to take writes again",
        )
        wait_for(
            lambda: "after" in names.names,
            timeout=20,
            message=lambda: (
                f"the informer to see the job created after the restart "
                f"(it listed {names.lists} times, holds {sorted(names.names)})"
            ),
        )
    finally:
        informer.stop()


def _create(kube: KubeClient, namespace: str, name: str) -> bool:
    from recall.kube import ApiError, Conflict

    try:
        create_job(kube, namespace, name)
    except Conflict:
        return True
    except ApiError:
        return False
    return True
