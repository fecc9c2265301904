"""The stages of one attempt beside the engine: decoding ahead of it, storing behind it.

    decode thread ──[≤ DECODE_DEPTH chunks]──▶ engine (the caller) ──[≤ STORE_DEPTH]──▶ store thread

- `Decoder` runs the media's chunk iterator on its own named thread, `depth` chunks ahead of
  the engine at most (a chunk's audio is the only large thing in flight: memory does not grow
  with the media's length).
- `Storer` writes each transcribed chunk to the results store on its own named thread, in the
  engine's order, and reports it once its object is durable (`stored`): only then may a
  checkpoint name it. At most `depth` chunks wait: a slow store blocks the engine's hand-over.
- Every wait polls `poll` (raising `LeaseLost` or `Stopped`) at least every `POLL` seconds, so a
  lost lease stops the caller at once; `abort()` stops a stage without waiting for it: the
  decoder reads nothing more, the storer writes nothing more (a put already sent completes).
- An error of a stage (a corrupt file, a store that refuses) is raised in the caller at its next
  hand-over with the stage, unchanged.
- Time is recorded in the `Stopwatch` (parts `media`: decoding, `store`: writing; the engine
  calls, a batch being one) and the waits in `recall_worker_stage_wait_seconds`.

Not guaranteed: a stage blocked inside a call (a download read, a put) notices `abort()` only
when that call returns; its thread is a daemon and its late result is dropped.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from recall.base import metrics
from recall.base.clock import SYSTEM, Clock
from recall.media.types import Chunk, Segment

POLL = 0.05  # seconds between two checks of the lease while a stage waits
T = TypeVar("T")


class Stopwatch:
    """Where one attempt's time goes, by part, and its engine calls; thread-safe."""

    PARTS = ("lease", "store", "engine", "media", "engine_waits")

    def __init__(self, clock: Clock = SYSTEM) -> None:
        self.clock = clock
        self.seconds: dict[str, float] = dict.fromkeys(self.PARTS, 0.0)
        self.engine_calls = 0
        self._lock = threading.Lock()

    def add(self, part: str, seconds: float) -> None:
        with self._lock:
            self.seconds[part] += seconds
            if part == "engine":
                self.engine_calls += 1

    def timed(self, part: str, fn: Callable[[], T]) -> T:
        """`fn()`, its time added to `part` (one call of the engine for part `engine`)."""
        started = self.clock.monotonic()
        try:
            return fn()
        finally:
            self.add(part, self.clock.monotonic() - started)

    def fields(self) -> dict[str, float]:
        """The log fields: `<part>_seconds` of every part, and `engine_calls`."""
        with self._lock:
            out = {f"{k}_seconds": round(v, 3) for k, v in self.seconds.items()}
            out["engine_calls"] = self.engine_calls
            return out


@dataclass(frozen=True)
class _End:
    """The decoder's last item: the iteration ended, or raised `error`."""

    error: BaseException | None = None


class _Stage(Generic[T]):
    """A named daemon thread and the bounded queue it shares with the caller."""

    def __init__(self, name: str, depth: int, clock: Clock = SYSTEM) -> None:
        if depth < 1:
            raise ValueError("a stage's queue holds at least one item")
        self.name = name
        self.clock = clock
        self.queue: queue.Queue[T] = queue.Queue(maxsize=depth)
        self.aborted = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def abort(self, join: float = 0.0) -> None:
        """Stop the stage: it takes and makes nothing more. Waits `join` seconds for it."""
        self.aborted.set()
        if join and self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(join)

    def _observe(self, stage: str, waited_for: str, since: float) -> None:
        waited = self.clock.monotonic() - since
        metrics.STAGE_WAIT.labels(stage=stage, waited_for=waited_for).observe(waited)

    def _put(self, item: T, stage: str) -> bool:
        """Hand `item` over; False when aborted first. Blocks while the queue is full."""
        waited = self.clock.monotonic()
        while not self.aborted.is_set():
            try:
                self.queue.put(item, timeout=POLL)
            except queue.Full:
                continue
            self._observe(stage, "room", waited)
            return True
        return False

    def _run(self) -> None:
        raise NotImplementedError


class Decoder(_Stage[Chunk | _End]):
    """Decodes `chunks` ahead of the engine; see the module contract."""

    def __init__(
        self, chunks: Iterator[Chunk], watch: Stopwatch, *, name: str, depth: int = 2
    ) -> None:
        super().__init__(name, depth, watch.clock)
        self.chunks = chunks
        self.watch = watch

    def _run(self) -> None:
        try:
            while not self.aborted.is_set():
                chunk = self.watch.timed("media", lambda: next(self.chunks, None))
                if chunk is None:
                    break
                if not self._put(chunk, "decode"):
                    return
        except BaseException as e:  # handed to the engine's side, which raises it
            self._put(_End(e), "decode")
            return
        self._put(_End(), "decode")

    def next(self, poll: Callable[[], None]) -> Chunk | None:
        """The next chunk, None after the last; raises what the decoding raised."""
        waited = self.clock.monotonic()
        while True:
            poll()
            try:
                item = self.queue.get(timeout=POLL)
            except queue.Empty:
                continue
            self._observe("engine", "input", waited)
            if isinstance(item, _End):
                if item.error is not None:
                    raise item.error
                return None
            return item


@dataclass(frozen=True)
class Transcribed:
    """A chunk the engine is done with (its audio dropped), and its segments."""

    chunk: Chunk
    segments: list[Segment]


class Storer(_Stage[Transcribed | None]):
    """Stores transcribed chunks in order behind the engine (the module contract): `store(item)`
    writes one (raising ends the stage); `stored(item)` is told, on this thread, once durable."""

    def __init__(
        self,
        store: Callable[[Transcribed], None],
        stored: Callable[[Transcribed], None],
        *,
        name: str,
        depth: int = 8,
        clock: Clock = SYSTEM,
    ) -> None:
        super().__init__(name, depth, clock)
        self.store = store
        self.stored = stored
        self.error: BaseException | None = None
        self._done = threading.Event()

    def _run(self) -> None:
        try:
            while not self.aborted.is_set():
                waited = self.clock.monotonic()
                try:
                    item = self.queue.get(timeout=POLL)
                except queue.Empty:
                    continue
                if item is None:
                    break
                self._observe("store", "input", waited)
                self.store(item)
                if self.aborted.is_set():
                    break
                self.stored(item)
        except BaseException as e:  # raised in the caller at its next hand-over
            self.error = e
        finally:
            self._done.set()

    def put(self, chunk: Chunk, segments: list[Segment], poll: Callable[[], None]) -> None:
        """Hand a chunk over, without its audio; blocks while `depth` chunks wait for the store."""
        item = Transcribed(replace(chunk, audio=None), segments)
        waited = self.clock.monotonic()
        self._hand(item, poll)
        self._observe("engine", "room", waited)

    def drain(self, poll: Callable[[], None]) -> None:
        """Wait until every chunk handed over is durable; raises the stage's error."""
        self._hand(None, poll)
        while not self.clock.wait(self._done, POLL):
            poll()
        self._raise_error()

    def _hand(self, item: Transcribed | None, poll: Callable[[], None]) -> None:
        while True:
            self._raise_error()
            poll()
            try:
                self.queue.put(item, timeout=POLL)
                return
            except queue.Full:
                continue

    def _raise_error(self) -> None:
        if self.error is not None:
            raise self.error
