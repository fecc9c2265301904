"""The worker's own engine and model, loaded at start-up, and what its registration says of it.

A named daemon thread ("engine-preload") loads them before the first job, so a model that cannot
load shows before any job fails on it (for local Whisper `settings.whisper_model`, fetched and
digest-checked as for a job, and shared with the jobs: one load per process). `state()` is what
the registration's next renewal writes (`recall.protocol.workers.EngineState`): `loading`, then
`loaded` with `<model>@<digest>` (and, from an engine that says, whether it is multilingual: the
operator fails unleased what an English-only pool cannot do), or `failed` with `<Reason>:
<message>` as a job would record it, tried again every `retry_seconds` until it loads or the
worker stops. An engine that loads nothing in this process (no `preload`) is `loaded` at once,
its label for the model.

Nothing here writes to the API server, nor holds up a claim: a job that comes while the model
loads waits for the same load (the engine's own lock). A cache this process cannot write
(`ModelCacheUnwritable`) goes to `cache_unwritable`: the worker claims nothing until the load
works (`recall.worker.loop`). Not guaranteed: a job that names another model than the worker's
loads it when it runs, and its failure is the job's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from recall.base import log
from recall.base.clock import SYSTEM, Clock
from recall.engines.base import Engine
from recall.engines.models import ModelCacheUnwritable
from recall.protocol.workers import FAILED, LOADED, LOADING, EngineState
from recall.resources.errors import JobFailure

_log = log.get("preload")


class Preload:
    """Loads `engine`'s own model on a thread of its own; `state()` says how far it got."""

    def __init__(
        self,
        engine: Engine,
        *,
        retry_seconds: float = 60.0,
        cache_unwritable: Callable[[ModelCacheUnwritable], None] = lambda e: None,
        clock: Clock = SYSTEM,
    ) -> None:
        self.engine = engine
        self.clock = clock
        self.retry_seconds = retry_seconds
        self.cache_unwritable = cache_unwritable  # told when the model cache refused the load
        self._state = EngineState(LOADING)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engine-preload", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """No more tries (a load under way is not interrupted: the thread is a daemon)."""
        self._stop.set()

    def state(self) -> EngineState:
        with self._lock:
            return self._state

    def load_once(self) -> EngineState:
        """Load the engine's own model now; the state it leaves (also `state()`)."""
        load: Callable[[], tuple[str, str]] | None = getattr(self.engine, "preload", None)
        try:
            if load is None:
                state = EngineState(LOADED, self.engine.label())
            else:
                model, digest = load()
                label = f"{model}@{digest}" if digest else model
                said: bool | None = getattr(self.engine, "multilingual", None)
                state = EngineState(LOADED, label, multilingual=said)
        except JobFailure as e:
            state = EngineState(FAILED, error=f"{e.reason}: {e.message}")
            if isinstance(e, ModelCacheUnwritable):  # the worker's own fault: it claims nothing
                self.cache_unwritable(e)
        except Exception as e:  # a bug, or an engine's own error: say it, never stop the worker
            state = EngineState(FAILED, error=f"EngineError: {type(e).__name__}: {e}")
        with self._lock:
            self._state = state
        if state.state == LOADED:
            _log.info("engine_loaded", engine=self.engine.name, model=state.model)
        else:
            _log.warning("engine_load_failed", engine=self.engine.name, error=state.error[:300])
        return state

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.load_once().state == LOADED:
                return
            self.clock.wait(self._stop, self.retry_seconds)
