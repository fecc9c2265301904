"""The pure parts of batched Whisper: windows inside a chunk, a window's words cut into
segments, and times moved from the batch's audio back to the chunk."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from recall.engines.whisper.align import (
    PAUSE_SECONDS,
    SEGMENT_SECONDS,
    ends_sentence,
    split_words,
    window_segments,
)
from recall.engines.whisper.windows import RATE, Window, speech_windows
from recall.media.types import Word


def word(text: str, start: float, end: float) -> Word:
    return Word(start=start, end=end, text=text, probability=0.9)


@pytest.mark.parametrize(
    ("text", "ends"),
    [
        (" man.", True),
        (" him?", True),
        (' "Go!"', True),
        (" Mr.", False),
        (" Dashwood,", False),
        (" J.", False),
        (" U.S.", False),
        (" said", False),
    ],
)
def test_ends_sentence(text: str, ends: bool) -> None:
    assert ends_sentence(text) is ends


def test_split_words__after_sentences_at_pauses_and_at_the_longest_segment() -> None:
    words = [
        word(" And", 0.2, 0.4),
        word(" Mr.", 0.4, 0.7),
        word(" John", 0.8, 1.0),
        word(" came.", 1.0, 1.5),
        word(" He", 1.7, 1.9),
        word(" waited", 1.9, 2.3),
        word(" long", 2.3 + PAUSE_SECONDS, 3.6),  # after a pause
    ]
    words += [word(f" w{i}", 4.0 + i, 4.5 + i) for i in range(int(SEGMENT_SECONDS) + 2)]
    groups = split_words(words)
    texts = ["".join(w.text for w in g).strip() for g in groups]
    # "long" starts at 3.3 s: w9, ending at 13.5 s, would take its segment past 10 s.
    assert texts == [
        "And Mr. John came.",
        "He waited",
        "long w0 w1 w2 w3 w4 w5 w6 w7 w8",
        "w9 w10 w11",
    ]
    assert [w for g in groups for w in g] == words  # every word, in order
    assert all(g[-1].end - g[0].start <= SEGMENT_SECONDS for g in groups)


def test_speech_windows__silence_has_none() -> None:
    assert speech_windows(np.zeros(10 * RATE, np.float32)) == []
    assert speech_windows(np.zeros(0, np.float32)) == []


def test_speech_windows__without_the_vad_the_chunk_in_slices() -> None:
    audio = np.zeros(70 * RATE, np.float32)
    assert speech_windows(audio, vad_filter=False) == [
        (0, 30 * RATE),
        (30 * RATE, 60 * RATE),
        (60 * RATE, 70 * RATE),
    ]


def test_window__times_in_the_batch_audio_move_back_to_the_chunk() -> None:
    # A window 3 s into its chunk, placed 61 s into the batch's audio.
    w = Window(chunk=2, first=3 * RATE, end=20 * RATE, at=61 * RATE)
    assert 61.5 + w.shift == pytest.approx(3.5)


def test_window_segments__cut_at_words_and_moved_into_the_chunk() -> None:
    shift = -40.0  # the window starts 40 s into the batch's audio, at the chunk's start
    raw = SimpleNamespace(
        text=" He was not an ill-disposed young man. Unless to be rather cold.",
        start=40.0,
        end=52.0,
        avg_logprob=-0.1,
        words=[
            SimpleNamespace(word=t, start=s - shift, end=e - shift, probability=0.9)
            for t, s, e in [
                (" He", 0.2, 0.4),
                (" was", 0.4, 0.6),
                (" not", 0.6, 0.8),
                (" an", 0.8, 0.9),
                (" ill-disposed", 0.9, 1.6),
                (" young", 1.6, 1.9),
                (" man.", 1.9, 2.3),
                (" Unless", 3.0, 3.4),
                (" to", 3.4, 3.5),
                (" be", 3.5, 3.6),
                (" rather", 3.6, 4.0),
                (" cold.", 4.0, 4.5),
            ]
        ],
    )
    sounds = [(0.2, 2.3), (3.0, 4.5)]
    kept = window_segments(raw, 30.0, sounds, shift=shift, floor=0.0, keep_words=True)
    assert [s.text for s in kept] == [
        "He was not an ill-disposed young man.",
        "Unless to be rather cold.",
    ]
    assert [(s.start, s.end) for s in kept] == [
        pytest.approx((0.2, 2.3)),
        pytest.approx((3.0, 4.5)),
    ]
    assert kept[0].words is not None and kept[0].words[0].start == pytest.approx(0.2)
    assert kept[0].confidence == pytest.approx(0.9048, abs=1e-4)
    bare = window_segments(raw, 30.0, sounds, shift=shift, floor=0.0, keep_words=False)
    assert [s.text for s in bare] == [s.text for s in kept]
    assert all(s.words is None for s in bare)


def test_window_segments__text_without_aligned_words_has_no_word_timings() -> None:
    """A window whose text the alignment gave no word to is one segment with `words` None
    (not []), so its subtitles and aws.json items are split in proportion."""
    raw = SimpleNamespace(text=" Mm hm.", start=0.0, end=1.0, avg_logprob=-0.2, words=[])
    for keep in (True, False):
        [whole] = window_segments(raw, 30.0, [(0.0, 1.0)], shift=0.0, floor=0.0, keep_words=keep)
        assert whole.text == "Mm hm." and whole.words is None
