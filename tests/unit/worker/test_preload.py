"""The worker's own engine and model loaded at start-up, and the state its registration says."""

from __future__ import annotations

from pathlib import Path

from recall.engines.simulated import SimulatedEngine
from recall.engines.whisper import WhisperEngine
from recall.protocol.workers import FAILED, LOADED, LOADING
from recall.resources.errors import JobFailure
from recall.worker.preload import Preload


class Flaky:
    """An engine whose model loads only at its `loads_at`-th try."""

    name = "whisper"

    def __init__(self, loads_at: int) -> None:
        self.tries = 0
        self.loads_at = loads_at

    def label(self) -> str:
        return "whisper/small"

    def preload(self) -> tuple[str, str]:
        self.tries += 1
        if self.tries < self.loads_at:
            raise JobFailure("ModelUnavailable", "s3://models/small/: no answer", permanent=False)
        return "s3://models/small/", "sha256:" + "c" * 64


def test_preload__loading_then_the_model_and_its_digest() -> None:
    preload = Preload(Flaky(loads_at=1))  # type: ignore[arg-type]
    assert preload.state().state == LOADING
    assert preload.load_once().state == LOADED
    assert preload.state().model == "s3://models/small/@sha256:" + "c" * 64


def test_preload__a_failure_as_a_job_would_record_it_then_tried_again() -> None:
    engine = Flaky(loads_at=3)  # the first try here, the second and third on its thread
    preload = Preload(engine, retry_seconds=0.01)  # type: ignore[arg-type]
    failed = preload.load_once()
    assert (failed.state, failed.error) == (
        FAILED,
        "ModelUnavailable: s3://models/small/: no answer",
    )
    preload.start()
    preload._thread.join(timeout=5)
    assert preload.state().state == LOADED and engine.tries == 3


def test_preload__an_engine_that_loads_nothing_here_is_loaded_at_once() -> None:
    state = Preload(SimulatedEngine()).load_once()
    assert (state.state, state.model) == (LOADED, SimulatedEngine().label())
    assert state.multilingual is None  # it cannot say: its pool's jobs stay offerable


def test_preload__whisper_says_whether_its_own_model_is_multilingual() -> None:
    state = Preload(WhisperEngine(device="cpu", threads=1)).load_once()  # the bundled tiny.en
    assert (state.state, state.multilingual) == (LOADED, False)
    assert state.model.startswith("tiny.en@")


def test_preload__whisper_with_a_model_that_is_not_there_fails_with_the_jobs_reason(
    tmp_path: Path,
) -> None:
    engine = WhisperEngine(model=str(tmp_path / "no-model"), device="cpu")
    state = Preload(engine).load_once()
    assert state.state == FAILED
    assert state.reason == "ModelNotFound" and "no-model" in state.error
