"""Where local Whisper runs: device and compute type from the worker's settings, with
CTranslate2's device count and supported types patched (no GPU here)."""

from __future__ import annotations

import pytest

from recall.base.settings import WorkerSettings
from recall.engines import device, make_engine
from recall.engines.device import DeviceUnavailable, Placement, place
from recall.engines.whisper import WhisperEngine

GPU_TYPES = {"float32", "float16", "int8", "int8_float16", "int8_float32", "bfloat16"}


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many CUDA devices CTranslate2 sees: `gpus[0]` (0 to start with)."""
    import ctranslate2

    seen = [0]
    monkeypatch.setattr(ctranslate2, "get_cuda_device_count", lambda: seen[0])
    real = ctranslate2.get_supported_compute_types

    def supported(name: str, *args: object) -> set[str]:
        if name == "cuda":
            if not seen[0]:
                raise RuntimeError("CUDA failed with error no CUDA-capable device is detected")
            return GPU_TYPES
        return set(real(name, *args))

    monkeypatch.setattr(ctranslate2, "get_supported_compute_types", supported)
    return seen


def test_auto__takes_the_cpu_and_int8_without_a_cuda_device(gpus: list[int]) -> None:
    assert place("auto", "auto") == Placement("cpu", "int8")


def test_auto__takes_cuda_and_float16_when_one_is_visible(gpus: list[int]) -> None:
    gpus[0] = 2
    assert place("auto", "auto") == Placement("cuda", "float16")
    assert place("auto", "int8_float16") == Placement("cuda", "int8_float16")


def test_cpu__is_the_cpu_even_with_a_gpu_visible(gpus: list[int]) -> None:
    gpus[0] = 1
    assert place("cpu", "auto") == Placement("cpu", "int8")
    assert place("cpu", "float32") == Placement("cpu", "float32")


def test_cuda__without_a_device_refuses_and_says_what_to_check(gpus: list[int]) -> None:
    with pytest.raises(DeviceUnavailable) as refused:
        place("cuda", "auto")
    message = str(refused.value)
    assert "\n" not in message
    assert "no CUDA device is visible" in message
    for what in ("nvidia.com/gpu", "NVIDIA device plugin", "CUDA image"):
        assert what in message


def test_cuda__with_a_device_is_float16_by_default(gpus: list[int]) -> None:
    gpus[0] = 1
    assert place("cuda", "auto") == Placement("cuda", "float16")


def test_compute_type__one_the_device_lacks_is_refused_naming_those_it_has(
    gpus: list[int],
) -> None:
    with pytest.raises(DeviceUnavailable) as refused:
        place("auto", "float16")  # a GPU pool's type on a node that fell back to the CPU
    assert "float16 is not supported on cpu" in str(refused.value)
    assert "int8" in str(refused.value)


def test_device_count__a_cuda_runtime_that_cannot_start_counts_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ctranslate2

    def broken() -> int:
        raise RuntimeError("CUDA driver version is insufficient for CUDA runtime version")

    monkeypatch.setattr(ctranslate2, "get_cuda_device_count", broken)
    assert device.cuda_devices() == 0
    assert place("auto", "auto").device == "cpu"


def test_engine__from_settings_takes_device_compute_type_and_batch_size(gpus: list[int]) -> None:
    engine = WhisperEngine.from_settings(WorkerSettings(batch_size=4, compute_type="float32"))
    assert engine.batch_size == 4
    assert engine.placement == Placement("cpu", "float32")
    gpus[0] = 1
    assert WhisperEngine.from_settings(WorkerSettings()).placement == Placement("cuda", "float16")


def test_engine__cuda_without_a_device_fails_where_the_worker_builds_it(gpus: list[int]) -> None:
    with pytest.raises(DeviceUnavailable, match="no CUDA device is visible"):
        make_engine(WorkerSettings(engine="whisper", device="cuda"))


def test_engine__the_simulated_engine_ignores_the_device(gpus: list[int]) -> None:
    # A simulated pool on a node that only advertises nvidia.com/gpu runs without CUDA.
    engine = make_engine(WorkerSettings(engine="simulated", device="cuda", batch_size=4))
    assert engine.batch_size == 4
