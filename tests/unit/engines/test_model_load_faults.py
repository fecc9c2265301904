"""Whose fault a failed Whisper load is (`recall.engines.whisper.model`): the device's (out of
memory, a CUDA error) is the worker's, retriable; anything else means the model is invalid, for
every worker. faster-whisper's `WhisperModel` is stubbed to raise."""

from __future__ import annotations

from pathlib import Path

import faster_whisper
import pytest

from recall.engines.device import Placement
from recall.engines.whisper import model
from recall.resources.errors import JobFailure

GPU = Placement("cuda", "float16")


def load_raising(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, error: Exception) -> JobFailure:
    def whisper_model(*args: object, **kw: object) -> object:
        raise error

    monkeypatch.setattr(faster_whisper, "WhisperModel", whisper_model)
    monkeypatch.setattr(model, "_models", {})
    with pytest.raises(JobFailure) as raised:
        model.load_model(str(tmp_path), 4, GPU)
    return raised.value


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("CUDA failed with error out of memory"),
        RuntimeError("CUDA driver version is insufficient for CUDA runtime version"),
        RuntimeError("cuBLAS failed with status CUBLAS_STATUS_ALLOC_FAILED"),
        RuntimeError("cuDNN failed with status CUDNN_STATUS_NOT_INITIALIZED"),
        MemoryError(),
    ],
    ids=["cuda-oom", "cuda-driver", "cublas", "cudnn", "host-memory"],
)
def test_load__a_device_failure_is_the_worker_s_and_retriable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, error: Exception
) -> None:
    failure = load_raising(monkeypatch, tmp_path, error)
    assert (failure.reason, failure.permanent) == ("DeviceFailed", False)
    assert type(error).__name__ in failure.message and "cuda device" in failure.message
    assert model._models == {}, "nothing is kept of a failed load"


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("Unable to open file 'model.bin' in model '/models/x'"),
        RuntimeError("Unable to open file 'model.bin' in model '/cache/whisper-large-cuda'"),
        RuntimeError("Unable to open file 'model.bin' in model '/cache/out of memory'"),
        ValueError("Unsupported model binary version"),
        OSError("config.json: no such file"),
    ],
)
def test_load__any_other_failure_means_the_model_is_invalid(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, error: Exception
) -> None:
    failure = load_raising(monkeypatch, tmp_path, error)
    assert (failure.reason, failure.permanent) == ("ModelInvalid", True)
