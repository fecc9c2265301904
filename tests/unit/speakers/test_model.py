"""The speaker model against the original: features as librosa computes them, vectors as
Torch's LSTM does (reference.json, made once by hack/speakers/reference.py), and a weights
reader that accepts nothing but tensors."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from recall.speakers.model import (
    TOLERANCE,
    ModelUnreadable,
    VoiceEncoder,
    mel_frames,
    normalised,
    packaged_weights,
    read_weights,
)
from tests.unit.speakers.signals import all_voices

REFERENCE = json.loads((Path(__file__).parent / "reference.json").read_text())


@pytest.fixture(scope="module")
def encoder() -> VoiceEncoder:
    return VoiceEncoder.packaged()


def test_features__match_librosa_within_a_millionth_of_the_peak() -> None:
    for wav, ref in zip(all_voices(), REFERENCE["signals"], strict=True):
        expected = np.array(ref["mel"], np.float32)
        got = mel_frames(normalised(wav))
        assert got.shape == expected.shape
        assert np.abs(got - expected).max() <= 1e-5 * np.abs(expected).max()


def test_vectors__match_torch_within_the_stated_tolerance(encoder: VoiceEncoder) -> None:
    for wav, ref in zip(all_voices(), REFERENCE["signals"], strict=True):
        vector = encoder.embed([wav])[0]
        expected = np.array(ref["vector"], np.float32)
        assert 1 - float(vector @ expected) <= TOLERANCE
        assert np.abs(vector - expected).max() <= 1e-4


def test_vectors__a_window_does_not_depend_on_its_batch(encoder: VoiceEncoder) -> None:
    voices = [v[:19200] for v in all_voices()]
    together = encoder.embed(voices)
    alone = np.stack([encoder.embed([v])[0] for v in voices])
    assert np.abs(together - alone).max() < 1e-5


def test_weights__are_the_packaged_models_own(encoder: VoiceEncoder) -> None:
    weights = read_weights(packaged_weights())
    assert weights["lstm.weight_ih_l0"].shape == (1024, 40)
    assert weights["linear.weight"].shape == (256, 256)
    assert sum(w.size for w in weights.values()) == 1_423_618


class _Planted:
    def __reduce__(self) -> tuple[object, tuple[()]]:
        import os

        return (os.getcwd, ())  # any callable outside the accepted few: never called


def test_weights__a_file_naming_any_other_class_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "planted.pt"
    with path.open("wb") as f:
        heads: tuple[object, ...] = (1, 1001, {})
        for head in heads:
            pickle.dump(head, f, protocol=2)
        pickle.dump({"model_state": _Planted()}, f, protocol=2)
    with pytest.raises(ModelUnreadable, match=r"posix\.getcwd|os\.getcwd"):
        read_weights(path)


def test_weights__a_truncated_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "short.pt"
    path.write_bytes(packaged_weights().read_bytes()[:5000])
    with pytest.raises(ModelUnreadable):
        read_weights(path)
