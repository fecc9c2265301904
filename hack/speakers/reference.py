#!/usr/bin/env python3
"""Makes tests/unit/speakers/reference.json: what the original speaker model computes, with
Torch and librosa, for the signals of tests/unit/speakers/signals.py. Run once, where Torch,
librosa and Resemblyzer 0.1.4 are installed (the recall runtime never has Torch):

    pip install --no-deps Resemblyzer==0.1.4 && pip install torch librosa onnx
    python3 hack/speakers/reference.py > tests/unit/speakers/reference.json

For each signal: its mel spectrogram as Resemblyzer computes it (`wav_to_mel_spectrogram`:
librosa's melspectrogram, after `normalize_volume(wav, -30, increase_only=True)`) and the
voice encoder's vector of that spectrogram (Resemblyzer's `VoiceEncoder.forward`, Torch's
LSTM). It also checks recall's ONNX graph (recall/speakers/onnx.py) with the
`onnx` package's checker and records the versions used. Resemblyzer's audio module is
replaced by a stub while importing (it imports webrtcvad and an old scipy path that the
encoder does not need).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

import librosa
import numpy as np
import torch

root = Path(__file__).resolve().parents[2]


def load(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def normalize_volume(wav: np.ndarray, target_dbfs: float) -> np.ndarray:
    # resemblyzer.audio.normalize_volume(wav, target_dBFS, increase_only=True)
    change = target_dbfs - 10 * np.log10(np.mean(wav**2))
    if change < 0:
        return wav
    return wav * (10 ** (change / 20))


def wav_to_mel_spectrogram(wav: np.ndarray) -> np.ndarray:
    # resemblyzer.audio.wav_to_mel_spectrogram, with resemblyzer.hparams' values
    frames = librosa.feature.melspectrogram(y=wav, sr=16000, n_fft=400, hop_length=160, n_mels=40)
    return frames.astype(np.float32).T


def main() -> None:
    sys.modules["resemblyzer.audio"] = types.ModuleType("resemblyzer.audio")
    for name in ("preprocess_wav", "wav_to_mel_spectrogram", "trim_long_silences",
                 "normalize_volume"):  # fmt: skip
        setattr(sys.modules["resemblyzer.audio"], name, None)
    from resemblyzer.voice_encoder import VoiceEncoder

    encoder = VoiceEncoder(device="cpu", verbose=False).eval()
    signals = load("signals", root / "tests/unit/speakers/signals.py")
    out: dict[str, object] = {
        "made_with": {
            "torch": torch.__version__,
            "librosa": librosa.__version__,
            "numpy": np.__version__,
            "resemblyzer": "0.1.4",
        },
        "signals": [],
    }
    for wav in signals.all_voices():
        wav64 = normalize_volume(wav.astype(np.float64), -30.0).astype(np.float32)
        mel = wav_to_mel_spectrogram(wav64)
        with torch.no_grad():
            vector = encoder(torch.from_numpy(mel[None])).numpy()[0]
        out["signals"].append(  # type: ignore[attr-defined]
            {
                "frames": int(mel.shape[0]),
                "mel": [[float(f"{x:.6g}") for x in row] for row in mel.tolist()],
                "vector": [float(f"{x:.8g}") for x in vector.tolist()],
            }
        )
    try:
        import onnx

        graph = load("recall_onnx", root / "operator/recall/speakers/onnx.py")
        rng = np.random.default_rng(0)
        layers = [
            (
                rng.standard_normal((1024, n)).astype(np.float32),
                rng.standard_normal((1024, 256)).astype(np.float32),
                rng.standard_normal(2048).astype(np.float32),
            )
            for n in (40, 256, 256)
        ]
        model = onnx.load_from_string(graph.lstm_stack(layers, 40, 256))
        onnx.checker.check_model(model, full_check=True)
        out["onnx_checker"] = f"passed (onnx {onnx.__version__})"
    except ImportError:
        out["onnx_checker"] = "not run (no onnx package)"
    json.dump(out, sys.stdout, separators=(",", ":"))


if __name__ == "__main__":
    main()
