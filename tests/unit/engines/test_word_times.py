"""Word times moved to the sound they were said in (Whisper's alignment, then the stretches of
sound): a start in the silence before a word moves to the word, a late start of the first word
after a pause moves back to it, an end past the sound moves back, and nothing goes backwards."""

from __future__ import annotations

import numpy as np

from recall.engines.whisper.align import islands, snap_to_sound
from recall.media.types import Word

RATE = 16_000


def audio(sounds: list[tuple[float, float]], seconds: float) -> np.ndarray:
    """A quiet hum with tone bursts over `sounds` (seconds)."""
    t = np.arange(int(seconds * RATE)) / RATE
    out = 0.0005 * np.sin(2 * np.pi * 50 * t)
    for a, b in sounds:
        span = (t >= a) & (t < b)
        out[span] += 0.3 * np.sin(2 * np.pi * 220 * t[span])
    return out.astype(np.float32)


def word(text: str, start: float, end: float) -> Word:
    return Word(start=start, end=end, text=f" {text}", probability=0.9)


def test_islands__bursts_with_short_silences_bridged() -> None:
    found = islands(audio([(0.5, 1.0), (1.05, 1.4), (2.0, 2.6)], 3.0))
    assert found == [(0.5, 1.4), (2.0, 2.6)]


def test_snap__starts_and_ends_follow_the_sound() -> None:
    sound = islands(audio([(0.5, 1.0), (2.0, 2.6), (3.5, 4.0)], 5.0))
    aligned = [
        word("early", 0.2, 1.3),  # starts in the silence before, ends after
        word("late", 2.3, 2.6),  # starts late in a sound after a pause
        word("long", 2.6, 4.6),  # spans a silence: it is the next sound
    ]
    snapped = snap_to_sound(aligned, sound)
    assert [(w.start, w.end) for w in snapped] == [(0.5, 1.0), (2.0, 2.6), (3.5, 4.0)]
    assert [w.text for w in snapped] == [w.text for w in aligned]


def test_snap__words_within_one_stretch_keep_their_times_in_order() -> None:
    sound = islands(audio([(0.0, 3.0)], 3.0))
    aligned = [word("a", 0.1, 0.9), word("b", 0.9, 1.8), word("c", 1.8, 2.9)]
    snapped = snap_to_sound(aligned, sound)
    assert [(w.start, w.end) for w in snapped] == [(0.0, 0.9), (0.9, 1.8), (1.8, 2.9)]
    assert snap_to_sound(aligned, [], floor=0.5)[0].start == 0.5  # no sound found: kept, floored


def test_segment_of__spans_its_words_after_they_moved_to_the_sound() -> None:
    """Whisper's segment starts at 1.2 s, its first word's sound at 1.0 s: snapped, the word
    starts at 1.0 s, and so does the segment (words stay inside their segment)."""
    from types import SimpleNamespace

    from recall.engines.whisper.align import segment_of

    sound = islands(audio([(1.0, 2.0)], 3.0))
    raw = SimpleNamespace(
        start=1.2,
        end=1.8,
        text=" hello there",
        avg_logprob=-0.1,
        words=[
            SimpleNamespace(word=" hello", start=1.2, end=1.5, probability=0.9),
            SimpleNamespace(word=" there", start=1.5, end=1.8, probability=0.8),
        ],
    )
    seg = segment_of(raw, 3.0, sound)
    assert seg.words is not None and seg.words[0].start == 1.0
    assert seg.start <= seg.words[0].start and seg.words[-1].end <= seg.end <= 3.0


def test_segment_of__no_aligned_word_means_no_word_timings() -> None:
    """Words asked for (`sounds` given) but none aligned: `words` is None, never []."""
    from types import SimpleNamespace

    from recall.engines.whisper.align import segment_of

    sound = islands(audio([(1.0, 2.0)], 3.0))
    raw = SimpleNamespace(start=1.0, end=2.0, text=" hm", avg_logprob=-0.1, words=[])
    assert segment_of(raw, 3.0, sound).words is None
    blank = SimpleNamespace(word=" ", start=1.0, end=1.1, probability=0.5)
    assert (
        segment_of(SimpleNamespace(**{**raw.__dict__, "words": [blank]}), 3.0, sound).words is None
    )
