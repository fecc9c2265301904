"""The events owed now and their deliveries: the notifier's outbox (`Notifier` fills it).

    outbox.owe(owed)          # an event loaded: its tries wait per sink, by time (`index.Ready`)
    outbox.send(pool, done)   # what is due, within each sink's bound in flight, signed now
    outbox.deleted(key, mono) # its object went: its tries are given up `delete_seconds` later

A try is signed at each send (a new timestamp, the same id and body) with the keys of its
sink's Secret, read again every `secret_seconds`. A missing key or unreadable Secret (forbidden,
any API error) sends nothing: the reason is the event's lastError, a Warning Event says so once
per sink, and the sink waits `secret_seconds` (the Secret is not read again before). Answers go
through `state.answered`. Each event whose record may have to change goes in `dirty`, for the
notifier's records. Shares the notifier's lock; the deliveries run on its pool's threads.
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import Executor

from recall.base import faults, log, metrics
from recall.base.clock import Clock
from recall.kube import Api, ApiError, ObjectRef
from recall.media.fetch import display_url
from recall.operator.notify import events
from recall.operator.notify.index import Deadlines, Ready
from recall.operator.notify.send import Sender
from recall.operator.notify.settings import NotifySettings
from recall.operator.notify.sign import HEADER, sign
from recall.operator.notify.state import Gate, Key, Owed, Pass, Try, answered, signing_keys
from recall.operator.notify.transport import Answer, Outcome

_log = log.get("notify")


class Outbox:
    """The loaded events (`owed`), their tries and their sinks' gates; see the module doc."""

    def __init__(
        self,
        store: Api,
        settings: NotifySettings,
        clock: Clock,
        sender: Sender,
        lock: threading.Lock,
        wake: threading.Event,
    ) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        self.sender = sender
        self.backoff = settings.backoff
        self._lock = lock
        self._wake = wake
        self.owed: dict[Key, Owed] = {}
        self.dirty: set[Key] = set()  # events whose record may have to be written
        self._gates: dict[str, Gate] = {}
        self._ready = Ready()
        self._deadlines = Deadlines(settings.delete_seconds)
        # A Secret's data as last read (a str: why it could not be read), and when.
        self._keys: dict[tuple[str, str], tuple[dict[str, bytes] | str | None, float]] = {}
        self._warned: set[str] = set()
        self._tries = 0  # requests sent by this process

    def deleted(self, key: Key, mono: float) -> None:
        """Its object was deleted (under the lock): its tries end `delete_seconds` later."""
        owed = self.owed.get(key)
        if owed is not None and owed.deleted_at is None:
            owed.deleted_at = mono
            self._deadlines.deleted(key, mono)

    def clear(self) -> None:
        """Forget every event (under the lock): a standby keeps nothing."""
        self.owed.clear()
        self.dirty.clear()
        self._gates.clear()
        self._ready.clear()
        self._deadlines.clear()

    def owe(self, owed: Owed) -> None:
        with self._lock:
            if owed.key in self.owed:
                return
            self.owed[owed.key] = owed
            for url, t in owed.tries.items():
                if not t.done:
                    self._ready.push(t.gate, t.at, owed.key, url)
            self.dirty.add(owed.key)  # settled already (recorded delivered): record it

    # -- sending -----------------------------------------------------------------------------

    def _secret(self, t: Try, done: Pass) -> list[bytes] | str:
        """The signing keys of `t`'s sink (the key, and `<key>.next` while rotating), or why
        there are none (`KeyMissing: ...`, also when the Secret cannot be read); a Secret is
        read again every `secret_seconds`, whatever the last read gave. Never raises ApiError."""
        ref = t.sink.secret_ref
        mono = self.clock.monotonic()
        cached = self._keys.get((t.secrets, ref.name))
        if cached is None or mono - cached[1] >= self.settings.secret_seconds:
            data: dict[str, bytes] | str | None
            try:
                data = self.store.get_secret(t.secrets, ref.name)
            except ApiError as e:
                done.errors.append(e.message)
                data = f"KeyMissing: Secret {t.secrets}/{ref.name} cannot be read: {e.message}"
                data = data[:500]
            cached = (data, mono)
            self._keys[(t.secrets, ref.name)] = cached
        if isinstance(cached[0], str):
            return cached[0]
        return signing_keys(cached[0], t)

    def send(self, pool: Executor | None, done: Pass) -> None:
        mono = self.clock.monotonic()
        with self._lock:
            expired = [self.owed.get(k) for k in self._deadlines.expired(mono)]
        for o in expired:
            if o is not None and o.deleted_at is not None:
                self._give_up_all(o)
        chosen: list[tuple[Owed, Try, list[bytes]]] = []
        with self._lock:
            gates = self._ready.gates()
        for g in gates:
            chosen += self._take(g, mono, done)
        for o, t, keys in chosen:
            done.sent += 1
            if pool is None:
                self._deliver(o, t, keys)
            else:
                pool.submit(self._deliver, o, t, keys)

    def _take(self, g: str, mono: float, done: Pass) -> list[tuple[Owed, Try, list[bytes]]]:
        """The tries of gate `g` to send now: due, within its bound in flight, signed."""
        chosen: list[tuple[Owed, Try, list[bytes]]] = []
        while True:
            with self._lock:
                gate = self._gates.setdefault(g, Gate())
                limit = self.settings.in_flight if gate.failures == 0 else 1
                if gate.at > mono or gate.in_flight >= limit:
                    return chosen
                taken = self._ready.due(g, mono)
                if taken is None:
                    return chosen
                o = self.owed.get(taken[0])
                t = o.tries.get(taken[1]) if o is not None else None
                if o is None or t is None or t.done or t.busy:
                    continue  # settled or dropped since it was queued
            if o.deleted_at is not None and mono - o.deleted_at >= self.settings.delete_seconds:
                self._give_up_all(o)
                continue
            keys = self._secret(t, done)
            if isinstance(keys, str):  # nothing is sent unsigned: the sink waits for its keys
                with self._lock:
                    self._ready.push(g, t.at, o.key, taken[1])
                self._key_missing(o, t, keys, mono)
                return chosen
            with self._lock:
                gate.in_flight += 1
                t.busy, t.sent = True, mono
            chosen.append((o, t, keys))

    def _deliver(self, o: Owed, t: Try, keys: list[bytes]) -> None:
        """One try, signed now (a retry gets a new timestamp; its id and body stay)."""
        stamp = int(self.clock.now().timestamp())
        headers = {
            "Content-Type": events.CONTENT_TYPE,
            HEADER: sign(o.event.body, keys, stamp),
        }
        try:
            answer = self.sender.post(t.sink.url, headers, o.event.body)
        except Exception as e:  # a bug in a sender must not leave the try busy for ever
            answer = Answer(Outcome.UNAVAILABLE, error=f"{type(e).__name__}: {e}"[:300])
        with self._lock:
            self._tries += 1
            tries = self._tries
        faults.hit("operator-after-notify", tries=tries)  # sent, not recorded: a crash here
        self._answered(o, t, answer)
        self._wake.set()

    def _answered(self, o: Owed, t: Try, answer: Answer) -> None:
        mono = self.clock.monotonic()
        with self._lock:
            gate = self._gates.setdefault(t.gate, Gate())
            gate.in_flight = max(0, gate.in_flight - 1)
            metrics.NOTIFY_DELIVERIES.labels(outcome=answer.outcome.value).inc()
            given_up = answered(t, gate, answer, mono, self.backoff, self.settings.max_refusals)
            if not t.done:
                self._ready.push(t.gate, t.at, o.key, t.sink.url)
            self.dirty.add(o.key)
        if answer.outcome is not Outcome.DELIVERED:
            _log.info(
                "notify_failed",
                id=o.event.id,
                type=o.event.type,
                object=o.ref.name,
                namespace=o.ref.namespace,
                sink=display_url(t.sink.url),
                outcome=answer.outcome.value,
                attempt=t.attempts,
                error=answer.error,
            )
        if given_up:
            self._gave_up(o, t)

    def _gave_up(self, o: Owed, t: Try) -> None:
        metrics.NOTIFY_DELIVERIES.labels(outcome="given_up").inc()
        sink = display_url(t.sink.url)  # its user info and query may hold a secret
        _log.warning("notify_given_up", id=o.event.id, object=o.ref.name, sink=sink)
        self._event(
            o.ref,
            "NotifyGivenUp",
            f"{o.event.type} to {sink} given up after {t.attempts} tries: {t.error}; "
            f"send it again with: recall notify resend {o.key[0]}/{o.ref.name}",  # job or batch
        )

    def _give_up_all(self, o: Owed) -> None:
        """A deleted object's event, `delete_seconds` later: its tries not in flight are given
        up (one in flight is given up when it comes back and would be sent again)."""
        why = "the object was deleted before its event was delivered"
        with self._lock:
            tries = [t for t in o.tries.values() if not t.done and not t.busy]
            for t in tries:
                t.done, t.error = "givenUp", why
            self.dirty.add(o.key)
        for t in tries:
            self._gave_up(o, t)

    def _key_missing(self, o: Owed, t: Try, why: str, mono: float) -> None:
        with self._lock:
            gate = self._gates.setdefault(t.gate, Gate())
            gate.at = mono + self.settings.secret_seconds  # one event asks again, later
            t.error = why
            warn = t.gate not in self._warned
            self._warned.add(t.gate)
            self.dirty.add(o.key)
        if warn:
            sink = display_url(t.sink.url)
            _log.warning("notify_key_missing", sink=sink, error=why, object=o.ref.name)
            self._event(o.ref, "NotifyKeyMissing", f"{sink}: {why}; its events wait")

    def _event(self, about: ObjectRef, reason: str, message: str) -> None:
        with contextlib.suppress(ApiError):  # best effort: the status and the log say it too
            self.store.post_event(about, "Warning", reason, message[:1000])
