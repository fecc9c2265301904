"""Subtitle cues: the rules hold on every input, and breaks fall where a reader expects them."""

from __future__ import annotations

import random
from typing import Literal

import pytest

from bench.cues import check, parse, proportional
from recall.media.types import Segment, Word
from recall.resources import SubtitleSpec
from recall.transcripts.subtitles import Rules, cues, lines, write
from recall.transcripts.words import tokens

# Whisper's segments of a LibriVox reading: one-line cues of up to 88 characters and 7.35 s
# when each segment is a cue.
LONG = [
    Segment(
        start=0.0,
        end=7.35,
        text=" And Mister John Dashwood had then leisure to consider how much there might be"
        " prudently",
    ),
    Segment(start=7.35, end=9.9, text=" in his power to do for them."),
    Segment(start=10.4, end=12.3, text=" He was not an ill-disposed young man,"),
    Segment(
        start=12.3,
        end=17.0,
        text=" unless to be rather cold-hearted and rather selfish is to be ill-disposed.",
    ),
]


def timed(
    text: str, start: float = 0.0, pace: float = 0.3, pauses: dict[int, float] | None = None
) -> Segment:
    """A segment whose words are `pace` seconds each, with a pause after word k of `pauses`."""
    words, at = [], start
    for k, w in enumerate(text.split()):
        words.append(Word(start=at, end=at + pace * 0.8, text=" " + w, probability=0.9))
        at += pace + (pauses or {}).get(k, 0.0)
    return Segment(start=start, end=words[-1].end, text=" " + text, words=words)


def test_cues__long_segments_follow_the_rules() -> None:
    found = cues(LONG)
    assert check(found) == []
    assert len(found) == 3  # 170 characters: two full lines a cue
    assert all(len(c.lines) <= 2 and all(len(line) <= 42 for line in c.lines) for c in found)
    assert " ".join(c.text.replace("\n", " ") for c in found) == " ".join(
        s.text.strip() for s in LONG
    )
    assert proportional(LONG)


def test_cues__break_after_a_sentence_not_inside_a_phrase() -> None:
    text = (
        "We met the director of the museum on a grey morning in March. She showed us the new "
        "wing and the garden behind it."
    )
    found = cues([timed(text, pace=0.1)])
    assert check(found) == []
    assert found[0].text.replace("\n", " ").endswith("March.")


def test_cues__a_pause_is_a_break() -> None:
    text = (
        "first we walked along the river for an hour and a half then we sat down by the old "
        "bridge to eat our lunch"
    )
    found = cues([timed(text, pace=0.1, pauses={11: 1.5})])
    assert check(found) == []
    assert (
        found[0].text.replace("\n", " ") == "first we walked along the river for an hour and a half"
    )


def test_cues__never_more_than_the_longest_time() -> None:
    slow = timed("one two three four five six seven eight nine ten", pace=1.5)
    found = cues([slow])
    assert check(found) == []
    assert all(c.end - c.start <= 7.0 + 1e-6 for c in found)
    assert len(found) >= 3


def test_cues__gap_and_shortest_time() -> None:
    a = timed("Yes.", start=0.0)
    b = timed("No.", start=0.29)
    rules = Rules(max_line_characters=6, max_lines=1)
    found = cues([a, b], rules)
    assert check(found, rules) == []
    assert [c.text for c in found] == ["Yes.", "No."]
    assert found[1].start - found[0].end >= 0.083 - 1e-3
    assert found[1].end - found[1].start >= 1.0  # nothing after it: a full second


def test_cues__settings_from_the_spec() -> None:
    rules = Rules.of(SubtitleSpec(max_line_characters=20, max_lines=1, max_cue_seconds=3.0))
    found = cues(LONG, rules)
    assert check(found, rules) == []
    assert all(len(c.lines) == 1 and len(c.lines[0]) <= 20 for c in found)
    assert Rules.from_data(rules.to_data()) == rules


@pytest.mark.parametrize("seed", range(40))
def test_cues__rules_hold_on_random_speech(seed: int) -> None:
    pick = random.Random(seed)
    vocabulary = [
        "a",
        "the",
        "council",
        "met",
        "tuesday,",
        "evening.",
        "budget",
        "extraordinary",
        "transport;",
        "and",
        "why?",
        "Dashwood",
        "x" * 45,
    ]
    segments, at = [], 0.0
    for _ in range(pick.randrange(1, 12)):
        text = " ".join(pick.choice(vocabulary) for _ in range(pick.randrange(1, 30)))
        if pick.random() < 0.5:
            seg = timed(text, start=at, pace=pick.uniform(0.05, 1.2))
        else:
            seg = Segment(start=at, end=at + pick.uniform(0.2, 12), text=text)
        segments.append(seg)
        at = seg.end + pick.choice([0.0, 0.01, 0.3, 2.0])
    rules = Rules(max_lines=pick.choice([1, 2, 3]), max_line_characters=pick.choice([32, 42]))
    found = cues(segments, rules)
    assert check(found, rules) == []
    said = [t.text for t in tokens(segments)]
    assert " ".join(c.text.replace("\n", " ") for c in found).split() == said
    again = parse(write(found, "srt"), "srt")
    assert [c.text for c in again] == [c.text for c in found]
    assert all(abs(a.start - b.start) < 1e-3 for a, b in zip(again, found, strict=True))


def test_lines__balanced_and_at_punctuation() -> None:
    said = "when the rain stopped, we went out to see the damage it had done"
    words = said.split()
    assert lines(words, 42, 2) == (
        "when the rain stopped,",
        "we went out to see the damage it had done",
    )
    assert lines(["x" * 50], 42, 2) == ("x" * 50,)
    assert lines(["y" * 30, "z" * 30, "w" * 30], 42, 2) is None


def test_write__vtt_and_srt_read_back() -> None:
    found = cues(LONG)
    fmt: Literal["srt", "vtt"]
    for fmt in ("srt", "vtt"):
        again = parse(write(found, fmt), fmt)
        assert [c.lines for c in again] == [c.lines for c in found]


def test_tokens__a_segment_with_empty_words_is_split_in_proportion() -> None:
    """`words=[]` (an engine that aligned no word) is a segment without word timings, as
    `words=None` is: its text is split in proportion, never dropped."""
    bare = Segment(start=2.0, end=4.0, text=" Two words.", words=[])
    none = bare.model_copy(update={"words": None})
    assert proportional([bare]) and proportional([none])
    assert tokens([bare]) == tokens([none])
    # by characters (and the space after each): 4 of 11 for "Two", 7 for "words."
    assert [(t.text, t.start, t.end) for t in tokens([bare])] == [
        ("Two", 2.0, pytest.approx(2.0 + 2.0 * 4 / 11)),
        ("words.", pytest.approx(2.0 + 2.0 * 4 / 11), 4.0),
    ]
    assert not proportional([timed("with words")])


@pytest.mark.parametrize("fmt", ["srt", "vtt"])
def test_cues__segments_without_word_timings_are_kept(fmt: Literal["srt", "vtt"]) -> None:
    """A transcript mixing segments with words and segments with `words=[]` keeps every
    word in its srt and vtt."""
    segments = [
        timed("First with its words."),
        Segment(start=3.0, end=5.0, text=" Then none were aligned.", words=[]),
        Segment(start=6.0, end=7.0, text=" And none asked.", words=None),
    ]
    found = parse(write(cues(segments), fmt), fmt)
    assert " ".join(c.text.replace("\n", " ") for c in found) == (
        "First with its words. Then none were aligned. And none asked."
    )
    assert check(found) == []
