"""Leader election for operator replicas, on a coordination.k8s.io Lease (as client-go does).

    elector = LeaderElector(store, namespace, "recall-operator", identity)
    elector.run(stop)        # thread: acquire, then renew until that fails, then step down

- One replica leads: the Lease's holder. It renews every `retry_period` and steps down on its
  own once no renewal succeeded for `renew_deadline`, before anyone may take over.
- Another replica takes over only after seeing the Lease unchanged for `lease_duration` on its
  own monotonic clock (never comparing the leader's timestamps with its clock).
- Every write carries the Lease's resourceVersion, so two candidates never both win.
- A leader that reads a Lease naming another holder steps down at once (`holds()` turns
  False), as client-go's `IsLeader` does, instead of waiting for its renew deadline.
- A Lease that disappears (deleted by hand) is a Lease that stopped being renewed: the
  replica that held it makes it again at once with its own term; any other replica makes it
  only after seeing it missing for `lease_duration` on its own clock, and with a term above
  every term it has seen, so the Batch's `operatorTerm` rule refuses the old leader's writes.
  Only a replica that has never seen the Lease (the first election) makes it at once.
  Not guaranteed: a replica that starts after the deletion and before the old leader's next
  renewal makes it at once with term 0; the old leader steps down at its next read, so both
  may write for up to `retry_period`, fenced by the term only if the old one's was above 0.
- `leading` is set while this replica leads. Standbys watch everything too, so a takeover
  needs no re-list and judges lease expiry from observations it already has.

`decide` is the pure part: given the Lease as read and what was observed of it, what to write.
"""

from __future__ import annotations

import datetime as dt
import threading
from dataclasses import KW_ONLY, dataclass
from typing import Any, Protocol

from recall.base import log
from recall.base.clock import SYSTEM, Clock, micro
from recall.kube import ApiError, Conflict, JobApi

_log = log.get("leader")
MAX_TERM = 2**31 - 1  # the Lease's leaseTransitions is an int32


@dataclass(frozen=True)
class Seen:
    """The Lease's holder and renewTime as first observed at `at` (our monotonic clock);
    `missing`: the Lease is gone since `at`, and `holder` is its last holder seen. `term` is
    the highest leaseTransitions observed so far."""

    holder: str | None
    renew_time: str | None
    at: float
    term: int = 0
    missing: bool = False

    def observe(self, spec: dict[str, Any] | None, now_mono: float) -> Seen:
        """What is known after reading `spec` (None: the Lease is missing) at `now_mono`."""
        if spec is None:
            if self.missing:
                return self
            return Seen(self.holder, None, now_mono, self.term, missing=True)
        holder, renew = spec.get("holderIdentity"), spec.get("renewTime")
        term = max(self.term, int(spec.get("leaseTransitions") or 0))
        if self.missing or (self.holder, self.renew_time) != (holder, renew):
            return Seen(holder, renew, now_mono, term)
        return Seen(holder, renew, self.at, term)


@dataclass(frozen=True)
class Decision:
    """Write `spec` (None: write nothing, we follow); `acquire` when taking the Lease over."""

    spec: dict[str, Any] | None
    acquire: bool = False


def decide(
    spec: dict[str, Any] | None,
    seen: Seen | None,
    me: str,
    now: dt.datetime,
    now_mono: float,
    lease_duration: float,
) -> Decision:
    """What to write to the Lease `spec` (None when it is missing), given what was `seen` of
    it (None: never read before)."""
    fresh = {
        "holderIdentity": me,
        "leaseDurationSeconds": int(lease_duration),
        "acquireTime": micro(now),
        "renewTime": micro(now),
        "leaseTransitions": 0,
    }
    if spec is None:
        if seen is None:  # the first election: nobody can have led yet
            return Decision(fresh, acquire=True)
        if seen.holder == me:  # ours, deleted under us: still ours, same term
            return Decision({**fresh, "leaseTransitions": seen.term})
        if now_mono - seen.at < lease_duration:
            return Decision(None)  # its holder may still be leading: wait as for a silent one
        return Decision({**fresh, "leaseTransitions": seen.term + 1}, acquire=True)
    holder = spec.get("holderIdentity")
    if holder == me:
        return Decision({**spec, "renewTime": micro(now)})
    unchanged = (
        seen is not None and seen.holder == holder and seen.renew_time == spec.get("renewTime")
    )
    if holder and not (unchanged and seen is not None and now_mono - seen.at >= lease_duration):
        return Decision(None)
    transitions = max(int(spec.get("leaseTransitions") or 0), seen.term if seen else 0) + 1
    return Decision({**fresh, "leaseTransitions": transitions}, acquire=True)


class Leadership(Protocol):
    """Whether this replica may write, and the leader term it writes with (None: the only
    replica, no leader election)."""

    term: int | None

    def holds(self) -> bool: ...

    def need_term(self, at_least: int) -> None: ...


class Sole:
    """The leadership of an operator that runs without leader election: always, no term."""

    term: int | None = None

    def holds(self) -> bool:
        return True

    def need_term(self, at_least: int) -> None:
        del at_least


@dataclass(eq=False)
class LeaderElector:
    """Leadership by a coordination.k8s.io Lease (a `Leadership`)."""

    store: JobApi
    namespace: str
    name: str
    identity: str
    _: KW_ONLY
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    clock: Clock = SYSTEM

    def __post_init__(self) -> None:
        if not self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("need retry_period < renew_deadline < lease_duration")
        self.leading = threading.Event()
        self._seen: Seen | None = None
        self._renewed_at = 0.0
        self.term: int | None = None  # the Lease's leaseTransitions as last written by us
        self._want_term = 0

    def need_term(self, at_least: int) -> None:
        """Raise the term with the next renewal to at least `at_least`: a status from a higher
        term is stored (the Lease was deleted and made again, and its count restarted)."""
        if at_least > MAX_TERM:
            # leaseTransitions is an int32: a term above it cannot be taken, and asking for
            # it would make every renewal fail. Say so; the Batch's status needs a person.
            _log.error("term_out_of_range", lease=self.name, wanted=at_least, limit=MAX_TERM)
            return
        self._want_term = max(self._want_term, at_least)

    def holds(self) -> bool:
        """Whether this replica may write now: it leads and its last renewal was sent within
        `renew_deadline` on its own clock. A replica frozen (a long pause, SIGSTOP) past its
        deadline writes nothing when it wakes, even before its elector thread has run again."""
        return (
            self.leading.is_set()
            and self.clock.monotonic() - self._renewed_at <= self.renew_deadline
        )

    def run(self, stop: threading.Event) -> None:
        """Try to lead until `stop`; step down (clear `leading`) when renewal fails."""
        try:
            while not stop.is_set():
                self.run_once()
                self.clock.wait(stop, self.retry_period)
        finally:
            if self.leading.is_set():
                self.leading.clear()
                self.release()
                _log.info("leader_stopped", lease=self.name, identity=self.identity)

    def release(self) -> None:
        """Give the Lease up (a graceful stop), so a standby takes over at once."""
        try:
            obj = self.store.get_lease(self.namespace, self.name)
            spec = (obj or {}).get("spec") or {}
            if obj is not None and spec.get("holderIdentity") == self.identity:
                spec = {**spec, "holderIdentity": None, "renewTime": micro(self.clock.now())}
                self.store.replace_lease(self.namespace, self.name, {**obj, "spec": spec})
        except ApiError as e:
            _log.warning("leader_release_failed", lease=self.name, error=e.message[:200])

    def run_once(self) -> bool:
        """One try to acquire or renew; returns whether this replica leads afterwards."""
        sent_at = self.clock.monotonic()
        try:
            ok = self._try(sent_at)
        except ApiError as e:
            _log.warning("leader_error", lease=self.name, error=e.message[:200])
            ok = False
        if ok:
            self._renewed_at = sent_at
            if not self.leading.is_set():
                self.leading.set()
                _log.info("leader_elected", lease=self.name, identity=self.identity)
        elif self.leading.is_set() and (
            self._other_holds() or self.clock.monotonic() - self._renewed_at > self.renew_deadline
        ):
            self.leading.clear()
            _log.warning("leader_lost", lease=self.name, identity=self.identity)
        return self.leading.is_set()

    def _other_holds(self) -> bool:
        """Whether the Lease last read names another holder: someone else was elected (our
        Lease was deleted and made again), so this replica must stop writing now."""
        seen = self._seen
        return seen is not None and not seen.missing and seen.holder not in (None, self.identity)

    def _try(self, now_mono: float) -> bool:
        obj = self.store.get_lease(self.namespace, self.name)
        spec = (obj or {}).get("spec")
        if self._seen is not None or spec is not None:
            self._seen = (self._seen or Seen(None, None, now_mono)).observe(spec, now_mono)
        decision = decide(
            spec, self._seen, self.identity, self.clock.now(), now_mono, self.lease_duration
        )
        if decision.spec is None:
            return False
        spec = decision.spec
        if int(spec.get("leaseTransitions") or 0) < self._want_term:
            spec = {**spec, "leaseTransitions": self._want_term}
        try:
            if obj is None:
                body = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": spec,
                }
                self.store.create_lease(self.namespace, body)
            else:
                self.store.replace_lease(self.namespace, self.name, {**obj, "spec": spec})
        except Conflict:
            return False
        # What we wrote is what we have seen last (client-go's observedRecord): a Lease deleted
        # after our own first write is still known to be ours.
        self._seen = (self._seen or Seen(None, None, now_mono)).observe(spec, now_mono)
        self.term = int(spec.get("leaseTransitions") or 0)
        if decision.acquire:
            _log.info("leader_acquired", lease=self.name, identity=self.identity)
        return True
