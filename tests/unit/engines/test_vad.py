"""Speech detection (`recall.engines.whisper.vad`): the same probabilities and the same stretches
of speech as faster-whisper's own Silero VAD, on real speech and on any probabilities."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import faster_whisper.vad as fw_vad
import numpy as np
import onnx
import pytest
from faster_whisper.vad import VadOptions
from onnx import TensorProto, helper

from recall.engines.whisper import language, vad
from recall.engines.whisper.windows import WINDOW_SECONDS, speech_of, stretches_of_each
from recall_dev import librivox

# What the engine asks (`windows.speech_of`), faster-whisper's defaults, and options that
# split long stretches, drop short ones and pad little.
OPTIONS = [
    VadOptions(max_speech_duration_s=WINDOW_SECONDS, min_silence_duration_ms=160),
    VadOptions(),
    VadOptions(
        max_speech_duration_s=3,
        min_silence_duration_ms=100,
        min_speech_duration_ms=250,
        speech_pad_ms=30,
    ),
    VadOptions(threshold=0.6, neg_threshold=0.2, max_speech_duration_s=1.5, speech_pad_ms=0),
]


@pytest.fixture(scope="module")
def speech(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray[Any, Any]:
    """The LibriVox clips once over (about 29 s of read speech with pauses), 16 kHz."""
    import av

    path = Path(tmp_path_factory.mktemp("vad")) / "librivox.wav"
    librivox.recording(path)
    resampler = av.AudioResampler(format="flt", layout="mono", rate=16_000)
    with av.open(str(path)) as container:
        parts = [
            out.to_ndarray().reshape(-1)
            for frame in container.decode(audio=0)
            for out in resampler.resample(frame)
        ]
    return np.concatenate(parts).astype(np.float32)


def reference_probabilities(audio: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    padded = np.pad(audio, (0, vad.FRAME - len(audio) % vad.FRAME))
    return np.asarray(fw_vad.get_vad_model()(padded)).reshape(-1)


@pytest.mark.parametrize("block", [vad.BLOCK, 100])
def test_probabilities__those_of_faster_whispers_session_on_read_speech(
    speech: np.ndarray[Any, Any], block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blocks of 100 frames carry the context and the LSTM's state across 9 block edges."""
    monkeypatch.setattr(vad, "BLOCK", block)
    for audio in (speech, speech[: 5 * vad.FRAME], speech[:1000], speech[: 3 * vad.FRAME - 10]):
        ours = vad.probabilities(audio)
        theirs = reference_probabilities(audio)
        assert ours.shape == theirs.shape == (len(audio) // vad.FRAME + 1,)
        assert float(np.abs(ours - theirs).max()) < 2e-5
    assert float(vad.probabilities(speech).max()) > 0.9  # the speech is heard


def test_probabilities_of__several_audios_side_by_side_as_each_alone(
    speech: np.ndarray[Any, Any],
) -> None:
    """A call's chunks of different lengths (within a block, across blocks, a frame, nothing)
    detected together: each gets the probabilities it gets alone."""
    audios = [speech[: 3 * 16_000], speech, speech[5 * 16_000 : 14 * 16_000 + 7], speech[:100]]
    audios.append(np.zeros(0, np.float32))
    together = vad.probabilities_of(audios)
    assert len(together) == len(audios)
    for audio, found in zip(audios, together, strict=True):
        alone = vad.probabilities(audio)
        assert found.shape == alone.shape == (len(audio) // vad.FRAME + 1,)
        assert float(np.abs(found - alone).max()) <= 1e-6
    options = OPTIONS[0]
    assert vad.speech_timestamps_of(audios, options) == [
        vad.speech_timestamps(a, options) for a in audios
    ]


@pytest.mark.parametrize("options", OPTIONS, ids=range(len(OPTIONS)))
def test_speech_timestamps__those_of_faster_whisper_on_read_speech(
    speech: np.ndarray[Any, Any], options: VadOptions
) -> None:
    ours = vad.speech_timestamps(speech, options)
    assert ours == fw_vad.get_speech_timestamps(speech, options)
    assert ours


def probability_runs(rng: random.Random, frames: int) -> np.ndarray[Any, Any]:
    """Runs of speech, pauses and hesitation, some values on the thresholds themselves."""
    out: list[float] = []
    while len(out) < frames:
        kind = rng.choice(["speech", "silence", "between", "edges"])
        length = rng.choice([1, 2, 3, 5, 8, 20, 60, 200])
        for _ in range(length):
            if kind == "speech":
                out.append(rng.uniform(0.5, 1.0))
            elif kind == "silence":
                out.append(rng.uniform(0.0, 0.35))
            elif kind == "between":
                out.append(rng.uniform(0.3, 0.55))
            else:
                out.append(rng.choice([0.5, 0.35, 0.6, 0.2, 0.45]))
    return np.asarray(out[:frames], np.float32)


def test_speech__the_stretches_faster_whisper_makes_of_any_probabilities(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Faster-whisper's `get_speech_timestamps` is handed the same probabilities by its model."""
    rng = random.Random(20261206)
    given: list[np.ndarray[Any, Any]] = []
    monkeypatch.setattr(fw_vad, "get_vad_model", lambda: lambda padded: given[-1][:, None])
    stretches = 0
    for _ in range(400):
        length = rng.randint(1, 2_500 * vad.FRAME)
        probs = probability_runs(rng, length // vad.FRAME + 1)
        given.append(probs)
        for options in OPTIONS:
            ours = vad.speech(probs, length, options)
            theirs = fw_vad.get_speech_timestamps(np.zeros(length, np.float32), options)
            assert ours == theirs, (length, options)
            stretches += len(ours)
    assert stretches > 10_000  # the cases are not all empty


def test_speech__none_in_silence() -> None:
    silent = np.zeros(5 * 16_000, np.float32)
    assert vad.speech_timestamps(silent, OPTIONS[0]) == []
    assert vad.speech_timestamps(np.zeros(1, np.float32), OPTIONS[0]) == []


def test_silero__refuses_a_graph_it_does_not_know(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["n", 576])
    y = helper.make_tensor_value_info("speech_probs", TensorProto.FLOAT, ["n", 576])
    graph = helper.make_graph(
        [helper.make_node("Relu", ["input"], ["speech_probs"])], "g", [x], [y]
    )
    path = tmp_path / "other.onnx"
    onnx.save(helper.make_model(graph), str(path))
    with pytest.raises(vad.UnknownGraph, match=r"other\.onnx"):
        vad.Silero(path)


def test_model__an_unknown_graph_falls_back_to_faster_whispers_session(
    speech: np.ndarray[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def unknown(path: Path) -> vad.Silero:
        raise vad.UnknownGraph(f"{path.name}: nodes ['Relu']")

    monkeypatch.setattr(vad, "_model", None)
    monkeypatch.setattr(vad, "Silero", unknown)
    audio = speech[: 10 * 16_000]
    assert np.array_equal(vad.probabilities(audio), reference_probabilities(audio))
    assert vad.speech_timestamps(audio, OPTIONS[0]) == fw_vad.get_speech_timestamps(
        audio, OPTIONS[0]
    )


def test_speech__thresholds_compared_as_numpy_compares_them() -> None:
    """A Python threshold is compared in float32, a numpy float64 one in float64."""
    at = np.float32(0.35)  # 0.3499999940395355, below the float64 0.35
    probs = np.asarray([0.9, at, 0.9, 0.9, 0.1], np.float32)
    fake = probs[:, None]
    for options in (
        VadOptions(neg_threshold=0.35, min_silence_duration_ms=0, speech_pad_ms=0),
        VadOptions(
            threshold=np.float64(0.5),
            neg_threshold=np.float64(0.35),
            min_silence_duration_ms=0,
            speech_pad_ms=0,
        ),
    ):
        ours = vad.speech(probs, 5 * vad.FRAME, options)
        with pytest.MonkeyPatch.context() as m:
            m.setattr(fw_vad, "get_vad_model", lambda: lambda padded: fake)
            assert ours == fw_vad.get_speech_timestamps(np.zeros(5 * vad.FRAME - 1), options)
    assert vad.speech(probs, 5 * vad.FRAME, options) != vad.speech(
        probs,
        5 * vad.FRAME,
        VadOptions(neg_threshold=0.35, min_silence_duration_ms=0, speech_pad_ms=0),
    )


def test_model__a_failed_load_of_any_kind_falls_back_once(
    speech: np.ndarray[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    tries: list[Path] = []

    def broken(path: Path) -> vad.Silero:
        tries.append(path)
        raise ImportError("No module named 'onnx'")

    monkeypatch.setattr(vad, "_model", None)
    monkeypatch.setattr(vad, "Silero", broken)
    audio = speech[: 3 * 16_000]
    for _ in range(3):
        assert np.array_equal(vad.probabilities(audio), reference_probabilities(audio))
    assert len(tries) == 1


def test_language_speech__what_faster_whisper_detects_its_language_on(
    speech: np.ndarray[Any, Any],
) -> None:
    """A file's language is detected on its speech gathered as faster-whisper's transcribe
    gathers it with its VAD filter (default options: short pauses kept, stretches put
    together), the first 30 s of it; silence in front is left out."""
    rate = 16_000
    pause = np.zeros(3 * rate, np.float32)  # longer than the 2 s a stretch keeps inside it
    audio = np.concatenate(
        [speech[: 10 * rate], pause, speech[10 * rate : 20 * rate], pause, speech]
    )
    stretches = fw_vad.get_speech_timestamps(audio, VadOptions())
    assert len(stretches) >= 3  # the two long pauses part the speech
    theirs = np.concatenate(fw_vad.collect_chunks(audio, stretches)[0])[: WINDOW_SECONDS * rate]
    ours = language.speech(audio)
    assert ours is not None and np.array_equal(ours, theirs)
    assert len(ours) == WINDOW_SECONDS * rate  # 55 s of speech: its first 30 s
    whole = language.speech(speech)
    cut = sum(b - a for a, b in speech_of(speech))  # the decoding windows' stretches
    assert whole is not None and len(whole) > cut  # the pauses between those are kept
    lead = np.concatenate([np.zeros(10 * rate, np.float32), speech])
    again = language.speech(lead)
    # the same speech, its first stretch padded 0.4 s into the silence (none of the 10 s else)
    assert again is not None and abs(len(again) - len(whole)) <= 0.4 * rate + vad.FRAME
    assert language.speech(np.zeros(5 * rate, np.float32)) is None


def test_stretches_of_each__padded_as_the_pipelines_vad_and_unpadded_one_for_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found once without the pad and padded after: the stretches `speech` makes with the
    pad in its options (the decoding windows' own), and the same ones before padding."""
    rng = random.Random(20261207)
    given: list[np.ndarray[Any, Any]] = []
    monkeypatch.setattr(vad, "probabilities_of", lambda audios: [given[-1]])
    for _ in range(300):
        length = rng.randint(1, 2_500 * vad.FRAME)
        given.append(probability_runs(rng, length // vad.FRAME + 1))
        [found] = stretches_of_each([np.zeros(length, np.float32)])
        padded = vad.speech(given[-1], length, OPTIONS[0])
        assert found.padded == [(s["start"], min(s["end"], length)) for s in padded]
        assert len(found.said) == len(found.padded)
        assert all(
            a <= c and d <= b for (a, b), (c, d) in zip(found.padded, found.said, strict=True)
        )
