"""Where local Whisper runs: the device and the CTranslate2 compute type, chosen once per process.

Contract:
- `place(device, compute_type)` answers before any model is loaded, so a worker that cannot run
  as configured refuses to start instead of failing every job it claims.
- `device`: "auto" is "cuda" when CTranslate2 sees a CUDA device, else "cpu"; "cuda" with none
  visible raises `DeviceUnavailable`, naming what to check; "cpu" is always honoured.
- `compute_type`: "auto" is int8 on a CPU, float16 on a GPU; any other must be one CTranslate2
  supports on the device, else `DeviceUnavailable` names those it does (CTranslate2 would
  refuse it only at load time, failing each job at its first chunk).
- A job's result records what the loaded model reports (int8 runs as "int8_float32" on a CPU),
  not the request.
- `device_fault(e)`: whether an error of a model's load is the device's (out of memory, host
  or GPU; a CUDA, cuBLAS or cuDNN error), which `DeviceFailed` carries: this worker's fault,
  not the job's (the worker releases the job, `recall.worker.loop`).
- Not guaranteed: that a visible GPU has the memory for the model and the batch; that shows
  at load (`DeviceFailed`) or at the first batch (a job failure).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from recall.resources.errors import JobFailure

Device = Literal["cpu", "cuda"]
AUTO_COMPUTE: dict[Device, str] = {"cpu": "int8", "cuda": "float16"}


class DeviceUnavailable(Exception):
    """The configured device or compute type cannot be used in this process (one line)."""


# What CTranslate2 (and the CUDA libraries under it) say when the device, not the model, failed
# ("CUDA failed with error out of memory", "cuBLAS failed with status …"); looked for outside
# quotes, where a message names the model's path (a folder named "…-cuda" is no device error).
_DEVICE_ERROR = re.compile(
    r"out of memory|CUDA failed|CUDA error|CUDA driver|cuBLAS|cuDNN", re.IGNORECASE
)
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


class DeviceFailed(JobFailure):
    """The device failed this process while it loaded a model (the module's `device_fault`):
    retriable, and the worker's fault, so the job is released, not failed."""

    REASON = "DeviceFailed"

    def __init__(self, message: str) -> None:
        super().__init__(self.REASON, message, permanent=False)


def device_fault(error: BaseException) -> bool:
    """True for an error of the device rather than of the model: memory ran out (the host's, or
    the GPU's in CUDA's words), or CUDA, cuBLAS or cuDNN failed."""
    if isinstance(error, MemoryError):
        return True
    if not isinstance(error, RuntimeError):
        return False
    return _DEVICE_ERROR.search(_QUOTED.sub("", str(error))) is not None


@dataclass(frozen=True)
class Placement:
    """Where the model runs: the device and the compute type to load it with."""

    device: Device
    compute_type: str


def cuda_devices() -> int:
    """CUDA devices CTranslate2 can use here (0 when its CUDA runtime cannot start)."""
    import ctranslate2

    try:
        return int(ctranslate2.get_cuda_device_count())
    except RuntimeError:  # a CUDA build on a machine without a driver
        return 0


def supported(device: Device) -> set[str]:
    import ctranslate2

    return set(ctranslate2.get_supported_compute_types(device))


def place(device: str = "auto", compute_type: str = "auto") -> Placement:
    """The placement for the worker's `device` and `compute_type` settings (see the contract)."""
    chosen: Device
    if device == "cpu":
        chosen = "cpu"
    elif device in ("auto", "cuda"):
        visible = cuda_devices()
        if device == "cuda" and visible == 0:
            raise DeviceUnavailable(
                "device cuda: no CUDA device is visible to this process; check that the pod "
                "requests nvidia.com/gpu, that the NVIDIA device plugin runs on its node, and "
                "that the worker runs the CUDA image (make image-cuda)"
            )
        chosen = "cuda" if visible > 0 else "cpu"
    else:
        raise DeviceUnavailable(f"device {device!r}: expected auto, cpu or cuda")
    if compute_type == "auto":
        return Placement(chosen, AUTO_COMPUTE[chosen])
    types = supported(chosen)
    if compute_type not in types:
        raise DeviceUnavailable(
            f"compute type {compute_type} is not supported on {chosen} here "
            f"(CTranslate2 supports {', '.join(sorted(types))}); RECALL_WORKER_COMPUTE_TYPE=auto "
            f"takes {AUTO_COMPUTE[chosen]} on {chosen}"
        )
    return Placement(chosen, compute_type)
