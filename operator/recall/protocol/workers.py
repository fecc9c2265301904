"""The worker registration record: how a worker says it is alive, and how that is read.

Each worker keeps one coordination.k8s.io Lease, `recall-worker-<id>`, in its namespace,
labelled with the component and its engine, and renews it every third of its duration. The
worker writes it (`recall.worker.registration`), the operator reads every one of them
(`recall.operator.registry`): this module is the record both sides agree on, so neither needs
the other. Pure: no I/O and no clock; a registration's liveness is judged by its reader, on
the reader's own monotonic clock, from when its `renewTime` was seen to change — never by
comparing the worker's timestamp with the reader's clock.

A registration has no part in the lease protocol of jobs: a job's lease lives in the job.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from recall.base.clock import micro
from recall.resources import LABEL_COMPONENT, RawObject, label_value

LABEL_ENGINE = "recall.dev/engine"
SELECTOR = f"{LABEL_COMPONENT}=worker,{LABEL_ENGINE}"
DEFAULT_DURATION = 15


def lease_name(worker: str) -> str:
    return f"recall-worker-{worker}"[:253]


def registration(
    namespace: str,
    worker: str,
    engine: str,
    *,
    duration: int,
    now: dt.datetime,
    resource_version: str | None = None,
) -> RawObject:
    """The registration Lease of `worker` as renewed at `now` (replacing the version
    `resource_version` when given)."""
    meta: RawObject = {
        "name": lease_name(worker),
        "namespace": namespace,
        "labels": {LABEL_COMPONENT: "worker", LABEL_ENGINE: label_value(engine)},
    }
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": meta,
        "spec": {
            "holderIdentity": worker,
            "leaseDurationSeconds": duration,
            "renewTime": micro(now),
        },
    }


@dataclass(frozen=True, slots=True)
class Registered:
    """What a registration Lease says, as read."""

    worker: str
    namespace: str
    engine: str
    renew_time: str
    duration: float

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.worker)


def read(raw: RawObject) -> Registered:
    """The record of a registration Lease (fields a careless writer left out read as empty)."""
    meta, spec = raw.get("metadata") or {}, raw.get("spec") or {}
    return Registered(
        worker=str(spec.get("holderIdentity") or ""),
        namespace=str(meta.get("namespace") or ""),
        engine=str((meta.get("labels") or {}).get(LABEL_ENGINE) or ""),
        renew_time=str(spec.get("renewTime") or ""),
        duration=float(spec.get("leaseDurationSeconds") or DEFAULT_DURATION),
    )
