"""The speaker-embedding model: Resemblyzer's GE2E voice encoder, its weights read from the
installed package, its forward pass in onnxruntime and numpy.

    encoder = VoiceEncoder.packaged()
    vectors = encoder.embed(windows)     # (n, 256), unit length

The network (Wan et al., "Generalized end-to-end loss for speaker verification", 2018, as
Resemblyzer 0.1.4 ships it, Apache-2.0): 40 mel bands of the power spectrum (25 ms Hann
windows every 10 ms at 16 kHz, Slaney's mel scale, as librosa computes them), three LSTM layers
of 256, a linear layer of 256, ReLU, L2 normalisation. 1.42 M parameters.

Contract:
- The weights are the package's own `resemblyzer/pretrained.pt` (Torch's legacy pickle format),
  read with a restricted unpickler: only an ordered dict, tensors rebuilt from typed storages
  and plain values are accepted; any other class refuses the file (`ModelUnreadable`). Neither
  Torch nor the package (it would import Torch) is imported: the file is found through the
  distribution's metadata. A missing package raises `ModelMissing`.
- `embed` is deterministic: a window's vector depends only on its own samples, never on the
  rest of the batch. It matches Torch and librosa within `TOLERANCE` (cosine distance), tested
  against reference vectors made once with them (`hack/speakers/reference.py`).
- Memory: a batch of `n` windows of `f` frames holds `n × f × 40` floats of features and
  `n × 1024` of gates per step; the caller bounds `n`.
"""

from __future__ import annotations

import collections
import functools
import importlib.metadata
import pickle
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from recall.speakers import onnx

RATE = 16_000
N_FFT = 400  # 25 ms
HOP = 160  # 10 ms
N_MELS = 40
HIDDEN = 256
LAYERS = 3
TARGET_DBFS = -30.0  # a window quieter than this is raised to it, as Resemblyzer does
DISTRIBUTION = "Resemblyzer"
WEIGHTS = "resemblyzer/pretrained.pt"
TOLERANCE = 1e-4  # cosine distance to the reference vectors made with Torch and librosa

Floats = npt.NDArray[np.float32]


class ModelMissing(RuntimeError):
    """The package that ships the weights is not installed."""


class ModelUnreadable(RuntimeError):
    """The weights file is not what this reader accepts."""


def packaged_weights() -> Path:
    """Where the installed Resemblyzer distribution keeps its weights."""
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise ModelMissing(
            f"the speaker model's package ({DISTRIBUTION} 0.1.4, installed without its "
            "dependencies: `pip install --no-deps Resemblyzer==0.1.4`) is not installed"
        ) from None
    for f in dist.files or ():
        if str(f) == WEIGHTS:
            return Path(str(dist.locate_file(f)))
    raise ModelMissing(f"{DISTRIBUTION} is installed without {WEIGHTS}")


# --- the weights ---------------------------------------------------------------------------

_STORAGES: dict[str, type[np.generic]] = {
    "FloatStorage": np.float32,
    "DoubleStorage": np.float64,
    "LongStorage": np.int64,
}


@dataclass(frozen=True)
class _Storage:
    key: str


@dataclass(frozen=True)
class _Tensor:
    storage: _Storage
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]


def _rebuild(storage: _Storage, offset: int, size: Any, stride: Any, *_: Any) -> _Tensor:
    return _Tensor(storage, int(offset), tuple(size), tuple(stride))


class _Unpickler(pickle.Unpickler):
    """Torch's legacy format, without Torch: storages by key (`dtypes`), tensors as views."""

    def __init__(self, f: IO[bytes]) -> None:
        super().__init__(f)
        self.dtypes: dict[str, type[np.generic]] = {}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild
        if module == "torch" and name in _STORAGES:
            return name
        raise ModelUnreadable(f"the weights file names {module}.{name}, which is not accepted")

    def persistent_load(self, pid: Any) -> Any:
        kind, storage_type, key, _location, _numel, _view = pid
        if kind != "storage" or storage_type not in _STORAGES:
            raise ModelUnreadable(f"the weights file has a {kind} of {storage_type}")
        self.dtypes[str(key)] = _STORAGES[storage_type]
        return _Storage(str(key))


def _load(f: IO[bytes]) -> Any:
    return _Unpickler(f).load()


def read_weights(path: Path) -> dict[str, Floats]:
    """The model's tensors (`model_state`) from a Torch legacy-format file, as float32."""
    with path.open("rb") as f:
        try:
            _load(f), _load(f), _load(f)  # magic number, protocol, system info
            unpickler = _Unpickler(f)
            checkpoint = unpickler.load()
            keys = _load(f)
            storages: dict[str, npt.NDArray[Any]] = {}
            for key in keys:
                (count,) = struct.unpack("<q", f.read(8))
                dtype = np.dtype(unpickler.dtypes.get(key, np.float32))
                storages[key] = np.frombuffer(f.read(count * dtype.itemsize), dtype)
        except (pickle.UnpicklingError, struct.error, EOFError, ValueError, TypeError) as e:
            raise ModelUnreadable(f"{path}: {e}") from None
    state = checkpoint.get("model_state") if isinstance(checkpoint, dict) else None
    if not isinstance(state, dict):
        raise ModelUnreadable(f"{path} holds no model_state")
    out: dict[str, Floats] = {}
    for name, t in state.items():
        if not isinstance(t, _Tensor):
            continue
        data = storages[t.storage.key]
        item = data.dtype.itemsize
        view = np.lib.stride_tricks.as_strided(
            data[t.offset :], shape=t.size, strides=[s * item for s in t.stride]
        )
        out[str(name)] = np.array(view, dtype=np.float32)
    return out


# --- the features --------------------------------------------------------------------------


def _hz_to_mel(f: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Slaney's mel scale (librosa's default): linear below 1 kHz, logarithmic above."""
    mels = f / (200.0 / 3)
    log = f >= 1000.0
    return np.where(log, 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / (np.log(6.4) / 27), mels)


def _mel_to_hz(m: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    hz = m * (200.0 / 3)
    log = m >= 15.0
    return np.where(log, 1000.0 * np.exp((np.log(6.4) / 27) * (m - 15.0)), hz)


@functools.cache
def mel_filters() -> Floats:
    """(40, 201): librosa.filters.mel(sr=16000, n_fft=400, n_mels=40), Slaney-normalised."""
    freqs = np.linspace(0, RATE / 2, 1 + N_FFT // 2)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(np.array(0.0)), _hz_to_mel(np.array(RATE / 2)),
                                   N_MELS + 2))  # fmt: skip
    widths = np.diff(edges)
    ramps = edges[:, None] - freqs[None, :]
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (edges[2:] - edges[:-2]))[:, None]
    return weights.astype(np.float32)


@functools.cache
def _window() -> npt.NDArray[np.float64]:
    n = np.arange(N_FFT)
    return 0.5 - 0.5 * np.cos(2 * np.pi * n / N_FFT)  # periodic Hann


def normalised(samples: Floats) -> Floats:
    """`samples` raised to `TARGET_DBFS` when quieter (never lowered), as Resemblyzer's
    `preprocess_wav` does."""
    power = float(np.mean(np.square(samples, dtype=np.float64))) if len(samples) else 0.0
    if power <= 0:
        return samples
    change = TARGET_DBFS - 10 * np.log10(power)
    if change <= 0:
        return samples
    return np.asarray(samples * 10 ** (change / 20), np.float32)


def mel_frames(samples: Floats) -> Floats:
    """(frames, 40): the power mel spectrogram, as librosa.feature.melspectrogram computes it
    (centred frames, zero padding), one frame per 10 ms plus one."""
    padded = np.pad(samples.astype(np.float64), N_FFT // 2)
    count = 1 + len(samples) // HOP
    idx = np.arange(N_FFT)[None, :] + HOP * np.arange(count)[:, None]
    spectrum = np.fft.rfft(padded[idx] * _window()[None, :], axis=1)
    power = spectrum.real**2 + spectrum.imag**2
    return (power @ mel_filters().T.astype(np.float64)).astype(np.float32)


# --- the network ---------------------------------------------------------------------------


def _gates(m: Floats) -> Floats:
    """Torch's gate order (input, forget, cell, output) → ONNX's (input, output, forget, cell)."""
    i, f, g, o = np.split(m, 4, axis=0)
    return np.concatenate([i, o, f, g], axis=0)


class VoiceEncoder:
    """GE2E's LSTM in onnxruntime (its graph from `recall.speakers.onnx`), the linear in numpy."""

    def __init__(self, weights: dict[str, Floats]) -> None:
        try:
            layers = [
                (
                    _gates(weights[f"lstm.weight_ih_l{k}"]),
                    _gates(weights[f"lstm.weight_hh_l{k}"]),
                    np.concatenate(
                        [
                            _gates(weights[f"lstm.bias_ih_l{k}"]),
                            _gates(weights[f"lstm.bias_hh_l{k}"]),
                        ]
                    ),
                )
                for k in range(LAYERS)
            ]
            self.linear = (weights["linear.weight"].T.copy(), weights["linear.bias"])
        except KeyError as e:
            raise ModelUnreadable(f"the weights lack {e}") from None
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        options.enable_cpu_mem_arena = False  # a batch's buffers go back once it is done
        self.session = ort.InferenceSession(
            onnx.lstm_stack(layers, N_MELS, HIDDEN), options, providers=["CPUExecutionProvider"]
        )

    @classmethod
    @functools.cache
    def packaged(cls) -> VoiceEncoder:
        """The encoder with the installed package's weights (read once per process)."""
        return cls(read_weights(packaged_weights()))

    def embed(self, windows: list[Floats]) -> Floats:
        """One unit vector per window of samples (16 kHz mono float32, all the same length),
        each raised to `TARGET_DBFS` first."""
        if not windows:
            return np.zeros((0, HIDDEN), np.float32)
        mels = np.stack([mel_frames(normalised(w)) for w in windows])  # (n, frames, 40)
        (hidden,) = self.session.run(
            None, {onnx.INPUT: np.ascontiguousarray(mels.transpose(1, 0, 2), np.float32)}
        )
        w, b = self.linear
        raw = np.maximum(hidden.reshape(len(mels), HIDDEN) @ w + b, 0)
        norm = np.linalg.norm(raw, axis=1, keepdims=True)
        return np.asarray(raw / np.maximum(norm, 1e-12), np.float32)
