"""Audio files for tests: samples encoded by PyAV as a codec and container would carry them."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import numpy.typing as npt
import pytest

from recall_dev import librivox, speech


def encode(
    path: Path, samples: npt.NDArray[np.float32], rate: int, codec: str, frame_size: int
) -> Path:
    """Mono `samples` at `rate` encoded with PyAV's `codec` into `path` (the container from its
    suffix), `frame_size` samples a frame."""
    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=rate, layout="mono")
        assert isinstance(stream, av.AudioStream)
        fmt = "fltp" if codec == "libmp3lame" else "flt"
        for i in range(0, len(samples), frame_size):
            frame = av.AudioFrame.from_ndarray(
                np.ascontiguousarray(samples[None, i : i + frame_size]), format=fmt, layout="mono"
            )
            frame.sample_rate = rate
            frame.pts = i
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return path


def librivox_twice(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The LibriVox clips twice over: ~58 s of read speech, and what is said in it."""
    out = tmp_path_factory.mktemp("librivox") / "librivox.wav"
    try:
        _seconds, said = librivox.recording(out, repeat=2)
    except speech.SpeechUnavailable as e:
        pytest.fail(str(e))
    return out, said
