"""A file split into channels (`channels: split`): each channel decoded on its own and cut channel
after channel, chunks labelled with their channel and timed in the file, a resume inside the
second channel exact; a mono file is one channel and says so."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import pytest

from recall.media import MediaOptions, load_media
from recall.media.media import CHANNEL_STRIDE

RATE = 16_000


def stereo(path: Path, seconds: float) -> tuple[np.ndarray, np.ndarray]:
    """A WAV whose left channel is a 440 Hz tone and whose right is noise."""
    t = np.arange(int(seconds * RATE)) / RATE
    left = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    right = (np.random.default_rng(1).standard_normal(len(t)) * 0.1).astype(np.float32)
    frames = np.stack([left, right], axis=1)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes((np.clip(frames, -1, 1) * 32767).astype("<i2").tobytes())
    return left, right


def mono(path: Path, seconds: float) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(np.zeros(int(seconds * RATE), "<i2").tobytes())


OPTIONS = MediaOptions(chunk_seconds=5, snap_seconds=0, split=True)


def test_split__each_channel_on_its_own_labelled_and_timed_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "call.wav"
    left, right = stereo(path, 12)
    with load_media(path.as_uri(), OPTIONS) as media:
        assert media.channels == 2 and not media.mono
        chunks = list(media.chunks())
    assert [c.channel for c in chunks] == ["ch0"] * 3 + ["ch1"] * 3
    assert [c.index for c in chunks] == list(range(6))
    assert [c.start for c in chunks] == [0, 5, 10] * 2
    assert [c.last for c in chunks] == [False] * 5 + [True]
    assert chunks[3].first == CHANNEL_STRIDE and chunks[2].end == 12 * RATE
    got_left = np.concatenate([c.audio for c in chunks[:3]])
    got_right = np.concatenate([c.audio for c in chunks[3:]])
    assert np.abs(got_left - left).max() < 1e-3  # not mixed down: each channel as it is
    assert np.abs(got_right - right).max() < 1e-3
    assert media.duration == 12.0


def test_split__a_resume_inside_the_second_channel_is_exact(tmp_path: Path) -> None:
    path = tmp_path / "call.wav"
    stereo(path, 12)
    with load_media(path.as_uri(), OPTIONS) as media:
        whole = list(media.chunks())
    with load_media(path.as_uri(), OPTIONS) as media:
        rest = list(media.chunks(whole[3].resume()))
    assert [(c.index, c.channel, c.first, c.end) for c in rest] == [
        (c.index, c.channel, c.first, c.end) for c in whole[4:]
    ]
    assert all(np.array_equal(a.audio, b.audio) for a, b in zip(rest, whole[4:], strict=True))
    with load_media(path.as_uri(), OPTIONS) as media:
        at_the_seam = list(media.chunks(whole[2].resume()))  # the first channel's end
    assert [c.index for c in at_the_seam] == [3, 4, 5] and at_the_seam[0].channel == "ch1"


def test_split__the_cutting_differs_from_a_mixed_one(tmp_path: Path) -> None:
    path = tmp_path / "call.wav"
    stereo(path, 6)
    plain = MediaOptions(chunk_seconds=5, snap_seconds=0)
    with load_media(path.as_uri(), OPTIONS) as split, load_media(path.as_uri(), plain) as mixed:
        assert split.cutting.differences(mixed.cutting) == ["the source changed"]
        assert mixed.channels == 1 and [c.channel for c in mixed.chunks()] == [None, None]


@pytest.mark.parametrize("split", [True, False])
def test_mono__one_channel_and_says_so_when_split_was_asked(tmp_path: Path, split: bool) -> None:
    path = tmp_path / "mono.wav"
    mono(path, 6)
    options = MediaOptions(chunk_seconds=5, snap_seconds=0, split=split)
    with load_media(path.as_uri(), options) as media:
        assert media.channels == 1 and media.mono is split
        assert [c.channel for c in media.chunks()] == [None, None]
