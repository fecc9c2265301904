"""The redacted audio (`redact.audio`): the source's audio with every redacted span silenced,
written a decoded block at a time into a file, never held whole in memory."""

from __future__ import annotations

import math
import tempfile
import tracemalloc
import wave
from pathlib import Path

import numpy as np
import pytest

from recall import media as audio
from recall.media.cut import encode_wav
from recall.media.decode import Decoder

RATE = audio.SAMPLE_RATE


def noise_wav(path: Path, seconds: int, rate: int = 8000) -> Path:
    """Noise as a 16-bit mono WAV, written a second at a time."""
    rng = np.random.default_rng(7)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        for _ in range(seconds):
            w.writeframes((rng.standard_normal(rate) * 3000).astype("<i2").tobytes())
    return path


def silenced_bytes(path: Path, spans: list[tuple[float, float]]) -> bytes:
    with (
        audio.load_media(path.as_uri(), audio.MediaOptions(chunk_seconds=30.0)) as media,
        tempfile.TemporaryFile() as out,
    ):
        media.silenced(spans, out)
        out.seek(0)
        return out.read()


def test_silenced__each_span_silent_and_every_other_sample_as_decoded(tmp_path: Path) -> None:
    path = noise_wav(tmp_path / "a.wav", 20)
    spans = [
        (3.0, 4.5),
        (4.0, 5.0),  # overlaps the one before
        (-1.0, 0.2),  # starts before the audio
        (19.5, 30.0),  # ends after it
        (7.0, 7.0),  # empty
        (12.0, 11.0),  # backwards: nothing
        (10.0001, 10.9999),  # inside one decoded block, off the sample grid
        (8.5, 8.75),  # listed after a later one
    ]
    blocks = list(Decoder(path, path.as_uri()).from_start())
    assert len(blocks) > 10  # the spans cross the blocks' edges
    expected = np.concatenate(blocks)
    for start, end in spans:
        first = max(0, int(start * RATE))
        expected[first : max(first, math.ceil(end * RATE))] = 0.0
    got = silenced_bytes(path, spans)
    assert got == encode_wav(expected)
    with wave.open(str(tmp_path / "a.wav")) as source, wave.open(_file(tmp_path, got)) as out:
        assert (out.getnchannels(), out.getframerate()) == (1, RATE)
        assert out.getnframes() == source.getnframes() * RATE // source.getframerate()
        pcm = np.frombuffer(out.readframes(out.getnframes()), "<i2")
    assert not pcm[3 * RATE : 5 * RATE].any() and not pcm[int(8.5 * RATE) : int(8.75 * RATE)].any()
    assert pcm[5 * RATE : 7 * RATE].any()


def _file(directory: Path, data: bytes) -> str:
    path = directory / "out.wav"
    path.write_bytes(data)
    return str(path)


def test_silenced__no_span_is_the_audio_as_decoded(tmp_path: Path) -> None:
    path = noise_wav(tmp_path / "a.wav", 3)
    blocks = list(Decoder(path, path.as_uri()).from_start())
    assert silenced_bytes(path, []) == encode_wav(np.concatenate(blocks))


def test_silenced__memory_stays_bounded_whatever_the_duration(tmp_path: Path) -> None:
    """Ten minutes decode to 38 MB of samples and a 19 MB WAV; writing it holds about a block."""
    path = noise_wav(tmp_path / "long.wav", 600)
    spans = [(float(s), s + 0.5) for s in range(0, 600, 7)]
    with (
        audio.load_media(path.as_uri(), audio.MediaOptions(chunk_seconds=30.0)) as media,
        tempfile.TemporaryFile() as out,
    ):
        tracemalloc.start()
        try:
            media.silenced(spans, out)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        size = out.seek(0, 2)
    assert size == 44 + 600 * RATE * 2
    assert peak < 8 * 1024**2, f"peak {peak / 1024**2:.1f} MiB for 38 MB of decoded audio"


@pytest.mark.parametrize("seconds", [0.0, 0.5])
def test_silenced__a_span_of_the_whole_file_leaves_only_silence(
    tmp_path: Path, seconds: float
) -> None:
    path = noise_wav(tmp_path / "a.wav", 2)
    got = silenced_bytes(path, [(seconds, 2.0), (0.0, seconds)])
    with wave.open(_file(tmp_path, got)) as out:
        assert not np.frombuffer(out.readframes(out.getnframes()), "<i2").any()
