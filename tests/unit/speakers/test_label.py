"""Windows from word times, streamed embedding independent of how the audio is cut, and each
word and segment labelled by its window's voice."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from recall.media.types import Segment, Word
from recall.resources import SpeakerSpec
from recall.speakers import bounds_of
from recall.speakers.cluster import Bounds
from recall.speakers.label import (
    GAP,
    WINDOW,
    Embedder,
    Window,
    label_voices,
    labelled,
    stretches,
    windows_of,
)
from recall.speakers.model import RATE, VoiceEncoder

Floats = npt.NDArray[np.float32]


class ToneEncoder(VoiceEncoder):
    """A stand-in for the model: a window's vector says which of a few tones it holds most
    of (the voices of these tests), so labels are checkable by construction."""

    TONES = (200.0, 500.0, 1100.0)

    def __init__(self) -> None:
        self.calls = 0

    def embed(self, windows: list[Floats]) -> Floats:
        self.calls += 1
        out = []
        for w in windows:
            t = np.arange(len(w)) / RATE
            power = [abs(np.dot(w, np.exp(2j * np.pi * f * t))) for f in self.TONES]
            v = np.array([0.2, *power], np.float64) + 1e-6
            out.append(v / np.linalg.norm(v))
        return np.array(out, np.float32)


def speech(turns: list[tuple[int, float, float]], seconds: float) -> Floats:
    """Tones for voice i over each (i, start, end)."""
    audio = np.zeros(round(seconds * RATE), np.float32)
    for voice, start, end in turns:
        a, b = round(start * RATE), round(end * RATE)
        t = np.arange(b - a) / RATE
        audio[a:b] += 0.3 * np.sin(2 * np.pi * ToneEncoder.TONES[voice] * t).astype(np.float32)
    return audio


def words_over(turns: list[tuple[int, float, float]]) -> list[Segment]:
    """A segment per turn, a word every 0.5 s of it."""
    out = []
    for _, start, end in turns:
        times = np.arange(start, end - 0.1, 0.5)
        words = [Word(start=float(t), end=float(min(t + 0.4, end)), text=" w", probability=0.9)
                 for t in times]  # fmt: skip
        out.append(Segment(start=start, end=end, text="w " * len(words), words=words))
    return out


TURNS = [(1, 0.5, 6.0), (0, 6.5, 9.0), (2, 9.4, 15.0), (1, 15.5, 18.0), (0, 18.6, 25.0)]


def test_stretches__join_words_closer_than_the_gap() -> None:
    spans = [(0.0, 0.4), (0.5, 0.9), (0.9 + GAP + 0.01, 2.0)]
    assert stretches(spans) == [(0.0, 0.9), (0.9 + GAP + 0.01, 2.0)]


def test_windows__tile_each_stretch_and_centre_a_short_one() -> None:
    windows = windows_of([(1.0, 1.3), (5.0, 5.0 + 2.5 * WINDOW)])
    assert len(windows) == 1 + 3
    size = round(WINDOW * RATE)
    assert all(w.end - w.first == size for w in windows)
    assert abs((windows[0].start + windows[0].stop) / 2 - 1.15) < 0.01
    assert windows[1].start <= 5.0 + 0.01 and windows[-1].stop >= 5.0 + 2.5 * WINDOW - 0.01


def test_embedder__the_same_vectors_however_the_audio_is_cut() -> None:
    audio = speech(TURNS, 26.0)
    windows = windows_of([(w.start, w.end) for s in words_over(TURNS) for w in s.words or []])

    def run(block: int) -> Floats:
        e = Embedder(ToneEncoder(), windows)
        for first in range(0, len(audio), block):
            e.add(first, audio[first : first + block])
        return e.finish()

    whole, small, odd = run(len(audio)), run(RATE // 3), run(48_001)
    assert np.array_equal(whole, small) and np.array_equal(whole, odd)


def test_embedder__keeps_only_the_audio_still_needed() -> None:
    audio = speech(TURNS, 26.0)
    windows = windows_of([(w.start, w.end) for s in words_over(TURNS) for w in s.words or []])
    e = Embedder(ToneEncoder(), windows)
    most = 0
    for first in range(0, len(audio), RATE):
        e.add(first, audio[first : first + RATE])
        most = max(most, len(e.buffer))
    assert most <= round(WINDOW * RATE) + RATE


def test_label__words_and_segments_by_voice_in_order_of_first_appearance() -> None:
    audio = speech(TURNS, 26.0)
    blocks = ((i, audio[i : i + 7 * RATE]) for i in range(0, len(audio), 7 * RATE))
    result = label_voices(ToneEncoder(), words_over(TURNS), blocks, Bounds())
    assert [s.speaker for s in result.segments] == ["S1", "S2", "S3", "S1", "S2"]
    for s in result.segments:
        assert {w.speaker for w in s.words or []} == {s.speaker}
    assert result.found.count == 3 and not result.found.short


def test_label__a_segment_takes_the_voice_of_most_of_its_words() -> None:
    windows = [Window(0, RATE), Window(RATE, 2 * RATE), Window(2 * RATE, 3 * RATE)]
    words = [Word(start=a, end=a + 0.5, text=" w", probability=1.0) for a in (0.2, 1.2, 2.2)]
    segment = Segment(start=0.2, end=2.7, text="w w w", words=words)
    (out,) = labelled([segment], windows, np.array([0, 1, 1]))
    assert [w.speaker for w in out.words or []] == ["S1", "S2", "S2"] and out.speaker == "S2"


def test_label__short_speech_before_the_first_second_is_one_voice() -> None:
    """Windows start at the file's start at the earliest, so two short stretches before 1 s
    are cut as the same window: the same vector twice is one voice, not an error."""
    audio = speech([(0, 0.0, 1.5)], 1.5)
    words = [
        Word(start=0.0, end=0.25, text=" Yes.", probability=0.9),
        Word(start=0.7, end=0.95, text=" No.", probability=0.9),
    ]
    segments = [Segment(start=0.0, end=0.95, text=" Yes. No.", words=words)]
    result = label_voices(ToneEncoder(), segments, [(0, audio)], Bounds())
    assert result.found.count == 1
    assert [w.speaker for w in result.segments[0].words or []] == ["S1", "S1"]


def test_label__segments_without_words_are_labelled_by_their_span() -> None:
    segments = [s.model_copy(update={"words": None}) for s in words_over(TURNS)]
    audio = speech(TURNS, 26.0)
    result = label_voices(ToneEncoder(), segments, [(0, audio)], Bounds())
    assert [s.speaker for s in result.segments] == ["S1", "S2", "S3", "S1", "S2"]


@pytest.mark.parametrize(
    ("spec", "bounds"),
    [
        (SpeakerSpec(), Bounds(least=1, most=20)),
        (SpeakerSpec(count=3), Bounds(count=3)),
        (SpeakerSpec(min=2, max=4), Bounds(least=2, most=4)),
        (SpeakerSpec(max=4), Bounds(least=1, most=4)),
    ],
)
def test_bounds__from_the_spec(spec: SpeakerSpec, bounds: Bounds) -> None:
    assert bounds_of(spec) == bounds


def test_label__numbered_in_time_order_with_segments_without_words() -> None:
    windows = [Window(0, 2 * RATE), Window(3 * RATE, 5 * RATE)]
    first = Segment(start=0.0, end=2.0, text=" hello")  # no words
    words = [Word(start=3.0, end=4.5, text=" there", probability=1.0)]
    second = Segment(start=3.0, end=5.0, text=" there", words=words)
    out = labelled([first, second], windows, np.array([0, 1]))
    assert [(s.start, s.speaker) for s in out] == [(0.0, "S1"), (3.0, "S2")]
