"""The worker registration record: how a worker says it is alive, and how that is read.

Each worker keeps one coordination.k8s.io Lease, `recall-worker-<id>`, in its namespace,
labelled with the component, its engine and its pool, annotated with its slots (leases it holds
at once), renewed every third of its duration. The worker writes it
(`recall.worker.registration`), the operator reads them all (`recall.operator.peers.registry`);
this module is the record both agree on. Pure: no I/O, no clock. Liveness is judged by the
reader on its own monotonic clock, from when `renewTime` was seen to change, never by comparing
the worker's timestamp with the reader's clock. A job's lease lives in the job, not here.

**Drain** (the built-in autoscaler's scale-down, `recall.operator.scaling.decide`):

- `recall.dev/state`: `idle`, `busy` or `draining`, written by the worker at every renewal (a
  hint: the operator learns a worker is busy first from the job leases it watches);
- `recall.dev/drain`: a request id, written by the operator on an idle worker it chose to
  remove; removed to cancel it;
- `recall.dev/drain-answer`: `<id>=drained` or `<id>=busy`, written by the worker at the first
  renewal that sees request `<id>`. `drained` is a promise: from the moment it was decided the
  worker claims nothing, takes no offer and answers 503 on `/readyz`, until the request is
  removed. `busy` means it held a job when the request came; the operator cancels it.

**Engine state** (read by `recall doctor`), written by the worker at its renewals:

- `recall.dev/engine-state`: `loading` until the worker loaded its own engine and model
  (`settings.whisper_model`, fetched and checked as a job's would be), then `loaded` or
  `failed`; absent on a worker of an older release;
- `recall.dev/engine-model`: `<model>@<digest>` (the engine's label for an engine that loads no
  model here);
- `recall.dev/engine-error`: while `failed`, `<Reason>: <message>` as a job would record it (at
  most `MAX_ENGINE_ERROR` characters);
- `recall.dev/engine-multilingual`: once `loaded`, `true` or `false`: whether the model knows
  more than English (absent when the engine loads no model here or cannot say). The operator
  fails, unleased, a job asking what only a multilingual model does when every live worker of
  its pool said `false` (`recall.operator.dispatch.unsupported`).

A job naming another model than its worker's loads it when it runs; its failures are the job's
(`status.lastError`), except `ModelCacheUnwritable` and `DeviceFailed` (the worker's faults): the
worker gives the job back and says `failed` with that reason until it can write its cache again,
or for its pause after the device failed (`recall.worker.probes`).

The worker renews with a full replace at the resourceVersion it read, keeping every annotation
it does not own, so a request written between its read and its write fails that write (409) and
is answered at the next renewal. Only a worker whose answer to the current request is `drained`
may be removed by a scale-down.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from recall.base.clock import micro
from recall.resources import DEFAULT_POOL, LABEL_COMPONENT, RawObject, label_value

__all__ = ["DEFAULT_POOL"]  # re-exported: the registration record's default pool

LABEL_ENGINE = "recall.dev/engine"
LABEL_POOL = "recall.dev/pool"
ANNOTATION_SLOTS = "recall.dev/slots"
SELECTOR = f"{LABEL_COMPONENT}=worker,{LABEL_ENGINE}"
DEFAULT_DURATION = 15
ANNOTATION_STATE = "recall.dev/state"
ANNOTATION_DRAIN = "recall.dev/drain"
ANNOTATION_ANSWER = "recall.dev/drain-answer"
IDLE, BUSY, DRAINING = "idle", "busy", "draining"
DRAINED = "drained"  # the answer that lets a scale-down remove the worker
ANNOTATION_ENGINE_STATE = "recall.dev/engine-state"
ANNOTATION_ENGINE_MODEL = "recall.dev/engine-model"
ANNOTATION_ENGINE_ERROR = "recall.dev/engine-error"
ANNOTATION_ENGINE_MULTILINGUAL = "recall.dev/engine-multilingual"
LOADING, LOADED, FAILED = "loading", "loaded", "failed"
MAX_ENGINE_ERROR = 512
ENGINE_ANNOTATIONS = (
    ANNOTATION_ENGINE_STATE,
    ANNOTATION_ENGINE_MODEL,
    ANNOTATION_ENGINE_ERROR,
    ANNOTATION_ENGINE_MULTILINGUAL,
)


@dataclass(frozen=True, slots=True)
class EngineState:
    """Whether a worker's engine and model loaded, as the module's engine-state annotations say
    it; `multilingual` None: not said."""

    state: str
    model: str = ""
    error: str = ""
    multilingual: bool | None = None

    @property
    def reason(self) -> str:
        """The failure's reason (`ModelNotFound`), empty when there is none."""
        return self.error.split(":", 1)[0].strip() if self.error else ""

    def annotations(self) -> dict[str, str]:
        out = {ANNOTATION_ENGINE_STATE: self.state}
        if self.model:
            out[ANNOTATION_ENGINE_MODEL] = self.model
        if self.error:
            out[ANNOTATION_ENGINE_ERROR] = self.error[:MAX_ENGINE_ERROR]
        if self.multilingual is not None:
            out[ANNOTATION_ENGINE_MULTILINGUAL] = "true" if self.multilingual else "false"
        return out


def lease_name(worker: str) -> str:
    return f"recall-worker-{worker}"[:253]


def registration(
    namespace: str,
    worker: str,
    engine: str,
    *,
    duration: int,
    now: dt.datetime,
    pool: str = DEFAULT_POOL,
    slots: int = 1,
    resource_version: str | None = None,
    state: str | None = None,
    answer: str | None = None,
    keep: dict[str, str] | None = None,
    engine_state: EngineState | None = None,
) -> RawObject:
    """The registration Lease of `worker` as renewed at `now` (replacing `resource_version`
    when given), saying `state`, `answer` and `engine_state` (None removes either of the last
    two), keeping the annotations of `keep` it does not own (the operator's drain request)."""
    meta: RawObject = {
        "name": lease_name(worker),
        "namespace": namespace,
        "labels": {
            LABEL_COMPONENT: "worker",
            LABEL_ENGINE: label_value(engine),
            LABEL_POOL: label_value(pool),
        },
    }
    owned = (ANNOTATION_STATE, ANNOTATION_ANSWER, ANNOTATION_SLOTS, *ENGINE_ANNOTATIONS)
    annotations = {k: v for k, v in (keep or {}).items() if k not in owned}
    annotations[ANNOTATION_SLOTS] = str(slots)
    if engine_state is not None:
        annotations.update(engine_state.annotations())
    if state is not None:
        annotations[ANNOTATION_STATE] = state
    if answer is not None:
        annotations[ANNOTATION_ANSWER] = answer
    if annotations:
        meta["annotations"] = annotations
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
    pool: str = DEFAULT_POOL
    slots: int = 1  # leases the worker holds at once
    state: str | None = None
    drain: str | None = None  # the operator's drain request, if any
    answered: str | None = None  # the worker's answer to that request: drained, busy or None
    engine_state: EngineState | None = None  # None: the worker does not say (an older one)

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.worker)

    @property
    def drained(self) -> bool:
        """The worker promised, for the current request, to take no more work."""
        return self.drain is not None and self.answered == DRAINED

    @property
    def refused(self) -> bool:
        """The worker held a job when the current request came."""
        return self.drain is not None and self.answered == BUSY


def answer(request: str, drained: bool) -> str:
    """The worker's answer to drain request `request`."""
    return f"{request}={DRAINED if drained else BUSY}"


def read(raw: RawObject) -> Registered:
    """The record of a registration Lease (fields a careless writer left out read as empty)."""
    meta, spec = raw.get("metadata") or {}, raw.get("spec") or {}
    annotations = meta.get("annotations") or {}
    drain = annotations.get(ANNOTATION_DRAIN) or None
    request, _, said = str(annotations.get(ANNOTATION_ANSWER) or "").rpartition("=")
    labels = meta.get("labels") or {}
    try:
        slots = max(1, int(annotations.get(ANNOTATION_SLOTS) or 1))
    except ValueError:
        slots = 1
    return Registered(
        worker=str(spec.get("holderIdentity") or ""),
        namespace=str(meta.get("namespace") or ""),
        engine=str(labels.get(LABEL_ENGINE) or ""),
        renew_time=str(spec.get("renewTime") or ""),
        duration=float(spec.get("leaseDurationSeconds") or DEFAULT_DURATION),
        pool=str(labels.get(LABEL_POOL) or DEFAULT_POOL),
        slots=slots,
        state=annotations.get(ANNOTATION_STATE) or None,
        drain=drain,
        answered=said if drain is not None and request == drain else None,
        engine_state=_engine_state(annotations),
    )


def _engine_state(annotations: dict[str, str]) -> EngineState | None:
    state = annotations.get(ANNOTATION_ENGINE_STATE)
    if not state:
        return None
    said = annotations.get(ANNOTATION_ENGINE_MULTILINGUAL)
    return EngineState(
        str(state),
        str(annotations.get(ANNOTATION_ENGINE_MODEL) or ""),
        str(annotations.get(ANNOTATION_ENGINE_ERROR) or ""),
        {"true": True, "false": False}.get(str(said)) if said else None,
    )


def with_drain(raw: RawObject, request: str | None) -> RawObject:
    """The registration Lease `raw` (as read, with its resourceVersion) with the drain request
    `request` set, or removed when None: the operator's replace body."""
    meta = dict(raw.get("metadata") or {})
    annotations = dict(meta.get("annotations") or {})
    if request is None:
        annotations.pop(ANNOTATION_DRAIN, None)
    else:
        annotations[ANNOTATION_DRAIN] = request
    meta["annotations"] = annotations
    return {**raw, "metadata": meta}
