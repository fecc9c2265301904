"""The operator's registry of live workers, from their registration Leases.

The informer's consumer for the Leases of `recall.protocol.workers.SELECTOR`. A worker counts
as alive while its Lease's renewTime changed within `leaseDurationSeconds` on the operator's
own monotonic clock (observed, as job leases are; never compared with the worker's clock). A
worker that let a job's lease expire is suspected: not alive until its renewTime changes again.
A worker asked to drain (or draining), or whose engine failed, is alive but not offered work
(`offerable`; it may still serve itself); its state and drain answer are kept current from
every version of its Lease, whoever wrote it, and so is what it says of its model (`model`,
and `multilingual`: None while it has not said).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, replace

from recall.base.clock import Clock
from recall.kube import RawObject
from recall.protocol import workers


@dataclass(frozen=True, slots=True, kw_only=True)
class Seen(workers.Registered):
    """A worker's registration as observed: when its renewTime last changed, on our clock."""

    observed_at: float

    def alive(self, now_mono: float) -> bool:
        return now_mono - self.observed_at < self.duration

    @property
    def model(self) -> str:
        """`<model>@<digest>` its engine loaded, as it registered it."""
        return self.engine_state.model if self.engine_state else ""

    @property
    def multilingual(self) -> bool | None:
        """Whether that model knows more than English."""
        return self.engine_state.multilingual if self.engine_state else None


class Registry:
    """The live workers, from their registration Leases. The informer's consumer."""

    def __init__(self, clock: Clock, wake: Callable[[], None] = lambda: None) -> None:
        self.clock = clock
        self.wake = wake
        self._seen: dict[tuple[str, str], Seen] = {}
        self._lock = threading.Lock()

    def relisted(self, items: Iterator[RawObject]) -> None:
        keep = {self._put(raw) for raw in items}
        with self._lock:
            for key in [k for k in self._seen if k not in keep]:
                del self._seen[key]
        self.wake()

    def changed(self, type_: str, obj: RawObject) -> None:
        if type_ == "DELETED":
            meta = obj.get("metadata") or {}
            with self._lock:
                spec = obj.get("spec") or {}
                self._seen.pop(
                    (meta.get("namespace") or "", spec.get("holderIdentity") or ""), None
                )
        else:
            self._put(obj)
        self.wake()

    def _put(self, raw: RawObject) -> tuple[str, str]:
        record = workers.read(raw)
        key = record.key
        with self._lock:
            old = self._seen.get(key)
            if old is None or old.renew_time != record.renew_time:
                at = self.clock.monotonic()
                seen = Seen(
                    **{f.name: getattr(record, f.name) for f in fields(record)}, observed_at=at
                )
            else:
                # A write by someone else (a drain request) is no sign of life, but news.
                seen = replace(
                    old,
                    state=record.state,
                    drain=record.drain,
                    answered=record.answered,
                    engine_state=record.engine_state,
                )
            self._seen[key] = seen
        return key

    def suspect(self, namespace: str, worker: str) -> None:
        """`worker` let a lease expire: not alive until its registration's renewTime changes."""
        with self._lock:
            old = self._seen.get((namespace, worker))
            if old is not None:
                self._seen[(namespace, worker)] = replace(old, observed_at=float("-inf"))

    def alive(self, now_mono: float) -> list[Seen]:
        with self._lock:
            return [s for s in self._seen.values() if s.worker and s.alive(now_mono)]

    def offerable(self, now_mono: float) -> list[Seen]:
        """The live workers that may be offered work: not asked to drain, not draining, and
        not saying that their engine failed (its model cache unwritable, its model not loaded:
        an offer would wait out `offer_seconds` unclaimed, or fail the job)."""
        return [
            s
            for s in self.alive(now_mono)
            if s.drain is None
            and s.state != workers.DRAINING
            and (s.engine_state is None or s.engine_state.state != workers.FAILED)
        ]
