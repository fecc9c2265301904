"""Speech detection: Silero VAD (the v6 weights faster-whisper bundles) over a whole chunk at once.

Contract:
- `probabilities(audio)`: the network's speech probability for each 32 ms frame (512 samples),
  as faster-whisper's `SileroVADModel` gives them (within 2e-5 for audio within [-1, 1]; the
  same frames, padded and read as it does). The encoder (an STFT written as a convolution, then
  four small convolutions) runs in numpy, the STFT as an FFT and each convolution as one matrix
  product per input step; only the LSTM and its decoder run in onnxruntime, cut out of the same
  ONNX file. faster-whisper's session runs the encoder as thousands of tiny products: 80 % of
  the VAD's time, and the VAD three quarters of the worker's CPU outside Whisper
  (docs/benchmarks.md).
- `speech(probs, length, options)`: the stretches of speech (sample ranges) by
  `faster_whisper.vad.VadOptions`' rules: a stretch starts at a frame of at least `threshold`,
  ends after `min_silence_duration_ms` below `neg_threshold` (default threshold − 0.15), is
  split at its last pause over 98 ms when longer than `max_speech_duration_s` (else cut at the
  limit), and is padded by `speech_pad_ms` (two closer than twice that meet halfway). The same
  ranges as faster-whisper's `get_speech_timestamps` on the same probabilities
  (tests/unit/engines/test_vad.py); on the same audio they differ only where a frame's
  probability lies within 2e-5 of a threshold: there an edge moves by a frame, or a pause
  splits a stretch.
- `speech_timestamps_of(audios, options)`: `speech_timestamps` of each, their LSTM run side by
  side as one batch (`Silero.many`: the same probabilities, half the LSTM's CPU over eight
  chunks).
- The model loads once per process, under a lock. A bundled graph this module does not know, or
  any failure to build the cut one, falls back to faster-whisper's own session with a warning
  (`vad_fallback`): slower, never wrong.
- Thread-safe: numpy and an onnxruntime session run concurrently.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from recall.base import log

if TYPE_CHECKING:
    from faster_whisper.vad import VadOptions

RATE = 16_000
FRAME = 512  # samples per decision: 32 ms
CONTEXT = 64  # samples of the frame before that each frame also sees
N_FFT, STFT_HOP = 256, 128
BINS = N_FFT // 2 + 1
STEPS = 4  # STFT columns per frame the encoder keeps
BLOCK = 256  # frames per encoder pass (8 s of audio): its arrays stay in the CPU's cache
# The ONNX graph this module knows: the encoder's nodes up to the LSTM, in order.
STFT_OPS = ["Pad", "Unsqueeze", "Conv", "Slice", "Slice", "Pow", "Pow", "Add", "Sqrt"]
ENCODER_OPS = [*STFT_OPS, *["Conv", "Relu"] * 4, "Transpose"]
CONVS = ((0, 1), (1, 2), (2, 2), (3, 1))  # (layer, stride); kernel 3, padding 1

_log = log.get("engine")
Array = np.ndarray[Any, np.dtype[np.float32]]


class UnknownGraph(Exception):
    """The bundled VAD file is not the network this module computes."""


class Conv:
    """A kernel-3, padding-1 convolution over time with a ReLU on (frames, steps, channels):
    each output step one product of the input steps it reads (a view) and its taps' weights
    stacked, with no partial products to add up after."""

    def __init__(self, weight: Array, bias: Array, stride: int) -> None:
        self.weight = weight  # (out channels, in channels, 3), as the ONNX file holds it
        self.bias = bias.astype(np.float32)
        self.stride = stride
        self.out = int(weight.shape[0])
        self._plans: dict[int, list[tuple[int, int, Array]]] = {}

    def plan(self, steps: int) -> list[tuple[int, int, Array]]:
        """For `steps` input steps, each output step o's (first input step, input steps, their
        taps' weights as one (steps × in, out) matrix): o reads input steps o·stride − 1 + k
        for the taps k that fall inside the input (padding reads zeros)."""
        if steps not in self._plans:
            plan = []
            for o in range((steps - 1) // self.stride + 1):
                taps = [k for k in range(3) if 0 <= o * self.stride - 1 + k < steps]
                matrix = np.concatenate([self.weight[:, :, k].T for k in taps], 0)
                first = o * self.stride - 1 + taps[0]
                plan.append((first, len(taps), np.ascontiguousarray(matrix, np.float32)))
            self._plans[steps] = plan
        return self._plans[steps]

    def __call__(self, x: Array) -> Array:
        frames, steps, channels = x.shape
        plan = self.plan(steps)
        y = np.empty((frames, len(plan), self.out), np.float32)
        for o, (first, count, matrix) in enumerate(plan):
            read = x[:, first : first + count, :].reshape(frames, count * channels)  # a view
            np.matmul(read, matrix, out=y[:, o, :])
        y += self.bias
        return np.maximum(y, 0, out=y)


class Silero:
    """The network, its encoder in numpy and its LSTM and decoder in onnxruntime."""

    def __init__(self, path: Path) -> None:
        import onnx
        from onnx import numpy_helper

        model = onnx.load(str(path))
        graph = model.graph
        ops = [node.op_type for node in graph.node]
        if ops[: len(ENCODER_OPS)] != ENCODER_OPS or ops[len(ENCODER_OPS)] != "LSTM":
            raise UnknownGraph(f"{path.name}: nodes {ops[: len(ENCODER_OPS) + 1]}")
        weights = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        try:
            basis = weights["encoder.feature_extractor.forward_basis_buffer"][:, 0, :]
            self.convs = [
                Conv(
                    weights[f"encoder.conv_layers.{k}.weight"],
                    weights[f"encoder.conv_layers.{k}.bias"],
                    stride,
                )
                for k, stride in CONVS
            ]
        except KeyError as e:
            raise UnknownGraph(f"{path.name}: no weight {e}") from None
        # The STFT's basis is a window times the DFT's cosines and sines: an FFT computes it.
        self.window: Array = np.ascontiguousarray(basis[0], np.float32)  # bin 0's cosine is 1
        n = np.arange(N_FFT)
        turns = 2 * np.pi * np.outer(np.arange(BINS), n) / N_FFT
        dft = np.concatenate([np.cos(turns), -np.sin(turns)]) * self.window
        if basis.shape != dft.shape or float(np.abs(basis - dft).max()) > 1e-5:
            raise UnknownGraph(f"{path.name}: the STFT's basis is not a windowed DFT")
        self.session = _decoder(model)

    def encode(self, audio: Array, before: Array) -> Array:
        """The encoder's output (frames, 1, 128) for `audio` (whole frames), `before` the
        CONTEXT samples in front of its first frame."""
        import scipy.fft

        frames = len(audio) // FRAME
        signal = np.concatenate([before, audio])
        # A frame is its CONTEXT samples and its own, reflected 64 further at its right edge;
        # its STFT columns start at 0, 128, 256 and 384 in it.
        framed = np.lib.stride_tricks.sliding_window_view(signal, CONTEXT + FRAME)[::FRAME]
        columns = np.empty((frames, STEPS, N_FFT), np.float32)
        for j in range(STEPS - 1):
            columns[:, j] = framed[:, j * STFT_HOP : j * STFT_HOP + N_FFT]
        own = CONTEXT + FRAME - (STEPS - 1) * STFT_HOP  # the frame's samples in the last column
        columns[:, -1, :own] = framed[:, -own:]
        columns[:, -1, own:] = framed[:, -2 : -2 - (N_FFT - own) : -1]
        columns *= self.window
        spectrum = scipy.fft.rfft(columns, axis=2)
        x: Array = np.sqrt(spectrum.real**2 + spectrum.imag**2)
        for conv in self.convs:
            x = conv(x)
        return x  # (frames, 1, 128)

    def many(self, audios: Sequence[Array]) -> list[Array]:
        """Speech probabilities of each of `audios` (whole frames), as each alone gives them:
        blocks are encoded audio by audio, and the LSTM runs over the audios' blocks as one
        batch (one product with its weights per step rather than one per audio)."""
        audios = [np.asarray(a, np.float32) for a in audios]
        h = np.zeros((1, len(audios), 128), np.float32)
        c = np.zeros((1, len(audios), 128), np.float32)
        before = [np.zeros(CONTEXT, np.float32) for _ in audios]
        out: list[list[Array]] = [[] for _ in audios]
        step = BLOCK * FRAME
        for at in range(0, max((len(a) for a in audios), default=0), step):
            live = [i for i, a in enumerate(audios) if at < len(a)]
            encoded = []
            for i in live:
                block = audios[i][at : at + step]
                if at + step >= len(audios[i]):
                    # faster-whisper's session reads the last CONTEXT samples as zeros.
                    block = block.copy()
                    block[-CONTEXT:] = 0
                encoded.append(self.encode(block, before[i]))
                before[i] = block[-CONTEXT:]
            frames = max(len(e) for e in encoded)
            x = np.zeros((frames, len(live), 128), np.float32)  # a shorter last block: zeros
            for j, e in enumerate(encoded):
                x[: len(e), j] = e[:, 0]
            probs, h[:, live], c[:, live] = self.session.run(
                None, {"encoded": x, "h": h[:, live], "c": c[:, live]}
            )
            probs = np.asarray(probs, np.float32).reshape(len(live), frames)
            for j, i in enumerate(live):
                out[i].append(probs[j, : len(encoded[j])])
        return [np.concatenate(o) if o else np.zeros(0, np.float32) for o in out]


def _decoder(model: Any) -> Any:
    """An onnxruntime session of what follows the encoder in `model`, for a batch of audios."""
    import onnx
    import onnxruntime
    from onnx import helper

    graph = model.graph
    tail = list(graph.node)[len(ENCODER_OPS) :]
    tail[0].input[0] = "encoded"
    used = {name for node in tail for name in node.input}
    inputs = [
        helper.make_tensor_value_info(
            name,
            onnx.TensorProto.FLOAT,
            ["frames", "batch", 128] if name == "encoded" else [1, "batch", 128],
        )
        for name in ("encoded", "h", "c")
    ]
    outputs = [
        helper.make_tensor_value_info(o.name, onnx.TensorProto.FLOAT, None) for o in graph.output
    ]
    cut = helper.make_model(
        helper.make_graph(
            tail,
            "silero-decoder",
            inputs,
            outputs,
            [t for t in graph.initializer if t.name in used],
        ),
        opset_imports=model.opset_import,
    )
    cut.ir_version = model.ir_version
    options = onnxruntime.SessionOptions()
    options.inter_op_num_threads = 1
    options.intra_op_num_threads = 1
    options.log_severity_level = 4
    return onnxruntime.InferenceSession(
        cut.SerializeToString(), sess_options=options, providers=["CPUExecutionProvider"]
    )


class Fallback:
    """faster-whisper's own session, one audio at a time."""

    def __init__(self) -> None:
        from faster_whisper.vad import get_vad_model

        self.session = get_vad_model()

    def many(self, audios: Sequence[Array]) -> list[Array]:
        return [np.asarray(self.session(a), np.float32).reshape(-1) for a in audios]


_model: Silero | Fallback | None = None
_lock = threading.Lock()


def model() -> Silero | Fallback:
    """The process's VAD network, loaded once."""
    global _model
    with _lock:
        if _model is None:
            from faster_whisper.utils import get_assets_path

            path = Path(get_assets_path()) / "silero_vad_v6.onnx"
            try:
                _model = Silero(path)
            except Exception as e:  # another graph, no onnx, a graph onnxruntime refuses
                _log.warning("vad_fallback", reason=f"{type(e).__name__}: {e}")
                _model = Fallback()
        return _model


def _level(threshold: float) -> float:
    """`threshold` as numpy compares a float32 probability with it: a Python number in
    float32, a numpy one in its own precision."""
    return float(threshold) if isinstance(threshold, np.floating) else float(np.float32(threshold))


def probabilities(audio: Array) -> Array:
    """One speech probability per 512 samples of `audio`, the last frame padded with zeros
    (a full frame of them when `audio` is a whole number of frames, as faster-whisper pads)."""
    return probabilities_of([audio])[0]


def probabilities_of(audios: Sequence[Array]) -> list[Array]:
    """`probabilities` of each of `audios`, their LSTM run side by side (`Silero.many`)."""
    padded = [np.pad(np.asarray(a, np.float32), (0, FRAME - len(a) % FRAME)) for a in audios]
    return model().many(padded)


def speech(probs: Array, length: int, options: VadOptions) -> list[dict[str, int]]:
    """The stretches of speech (`{"start", "end"}`, samples) `probs` make (the module contract)."""
    on = _level(options.threshold)
    neg = options.neg_threshold
    off = _level(neg if neg is not None else max(options.threshold - 0.15, 0.01))
    shortest = RATE * options.min_speech_duration_ms / 1000
    pad = RATE * options.speech_pad_ms / 1000
    longest = RATE * options.max_speech_duration_s - FRAME - 2 * pad
    pause = RATE * options.min_silence_duration_ms / 1000
    split_pause = RATE * 98 / 1000  # a pause a too-long stretch may be split at

    found: list[dict[str, int]] = []
    start: int | None = None  # the open stretch's first sample
    quiet = 0  # where the open stretch fell below `off`, 0 while it has not
    split = 0  # the end of the open stretch's last pause over `split_pause`, 0 if none
    resume = 0  # where speech came back after that pause

    for i, p in enumerate(np.asarray(probs, np.float32).reshape(-1).tolist()):
        x = i * FRAME
        if p >= on and quiet:
            quiet = 0
            if resume < split:
                resume = x
        if p >= on and start is None:
            start = x
            continue
        if start is not None and x - start > longest:
            if split:
                found.append({"start": start, "end": split})
                start = None if resume < split else resume
                split = resume = quiet = 0
            else:
                found.append({"start": start, "end": x})
                start, split, resume, quiet = None, 0, 0, 0
                continue
        if p < off and start is not None:
            quiet = quiet or x
            if x - quiet > split_pause:
                split = quiet
            if x - quiet < pause:
                continue
            if quiet - start > shortest:
                found.append({"start": start, "end": quiet})
            start, split, resume, quiet = None, 0, 0, 0
    if start is not None and length - start > shortest:
        found.append({"start": start, "end": length})

    return padded(found, pad, length)


def padded(found: list[dict[str, int]], pad: float, length: int) -> list[dict[str, int]]:
    """`found` (in order) each widened by `pad` samples within [0, `length`], two closer than
    twice that meeting halfway between them."""
    for k, stretch in enumerate(found):
        if k == 0:
            stretch["start"] = int(max(0, stretch["start"] - pad))
        if k + 1 < len(found):
            after = found[k + 1]
            gap = after["start"] - stretch["end"]
            if gap < 2 * pad:
                stretch["end"] += gap // 2
                after["start"] = max(0, after["start"] - gap // 2)
            else:
                stretch["end"] = int(min(length, stretch["end"] + pad))
                after["start"] = int(max(0, after["start"] - pad))
        else:
            stretch["end"] = int(min(length, stretch["end"] + pad))
    return found


def speech_timestamps(audio: Array, options: VadOptions) -> list[dict[str, int]]:
    return speech(probabilities(audio), len(audio), options)


def speech_timestamps_of(
    audios: Sequence[Array], options: VadOptions
) -> list[list[dict[str, int]]]:
    found = probabilities_of(audios)
    return [speech(p, len(a), options) for p, a in zip(found, audios, strict=True)]
