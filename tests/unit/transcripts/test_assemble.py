"""A transcript from its chunk records: a sentence cut at a chunk's end joined again (no marks
the speech did not have), held-back pieces put together, the channels of a split file
interleaved by time."""

from __future__ import annotations

from recall.media.types import Segment, Word
from recall.transcripts.assemble import assemble
from recall.transcripts.records import Record


def seg(text: str, start: float, channel: str | None = None, words: bool = True) -> Segment:
    parts = text.split(" ")
    ws = [
        Word(start=start + i, end=start + i + 0.5, text=" " + p, probability=0.9)
        for i, p in enumerate(parts)
    ]
    return Segment(
        start=start,
        end=start + len(parts),
        text=" " + text,
        words=ws if words else None,
        channel=channel,
    )


def record(*segments: Segment, carried: bool = False, channel: str | None = None) -> Record:
    return Record(0, 1, "", list(segments), channel=channel, carried=carried)


def test_seam__an_ellipsis_on_both_sides_is_one_sentence() -> None:
    out = assemble(
        [
            record(seg("Scientists at New University have...", 0)),
            record(seg("...built a small robot.", 10)),
        ]
    )
    text = " ".join(s.text.strip() for s in out)
    assert text == "Scientists at New University have built a small robot."
    words = [w.text.strip() for s in out for w in s.words or []]
    assert "have" in words and "built" in words and not any("..." in w for w in words)


def test_seam__the_word_after_it_is_written_as_inside_a_sentence() -> None:
    out = assemble([record(seg("and then we...", 0)), record(seg("...Walked home.", 10))])
    assert out[1].text == " walked home." and out[1].words is not None
    assert out[1].words[0].text == " walked"


def test_seam__names_and_I_keep_their_capital() -> None:
    out = assemble(
        [
            record(seg("we met Anna and...", 0)),
            record(seg("...Anna said hello.", 10)),
            record(seg("So then...", 20)),
            record(seg("...I left.", 30)),
        ]
    )
    assert out[1].text == " Anna said hello." and out[3].text == " I left."


def test_seam__a_lone_ellipsis_word() -> None:
    a = seg("they have", 0)
    a = a.model_copy(
        update={
            "text": " they have...",
            "words": [*(a.words or []), Word(start=2, end=2, text="...", probability=0.5)],
        }
    )
    b = seg("... Built it.", 10)
    out = assemble([record(a), record(b)])
    assert out[0].text == " they have" and out[1].text == " built it."


def test_seam__a_full_stop_at_a_chunks_end_before_lower_case_goes() -> None:
    out = assemble([record(seg("the robot was built.", 0)), record(seg("by students.", 10))])
    assert [s.text for s in out] == [" the robot was built", " by students."]


def test_marks_the_speech_had_stay() -> None:
    same = [seg("well...", 0), seg("...fine.", 3)]  # inside one chunk: not a cut
    out = assemble([record(*same), record(seg("The end.", 10))])
    assert out[0].text == " well" and out[1].text == " fine."  # (an ellipsis pair is a cut)
    kept = assemble([record(seg("It was cold.", 0)), record(seg("So we left.", 10))])
    assert [s.text for s in kept] == [" It was cold.", " So we left."]
    trailing = assemble([record(seg("and so on...", 0)), record(seg("Next one.", 10))])
    assert trailing[0].text == " and so on..."


def test_carried_piece__is_one_segment_again() -> None:
    first = seg("my number is", 0)
    rest = seg("five five five", 3)
    out = assemble([record(first), record(rest, seg("bye.", 10), carried=True)])
    assert [s.text for s in out] == [" my number is five five five", " bye."]
    assert (out[0].start, out[0].end) == (0, 6)
    assert out[0].words is not None and len(out[0].words) == 6


def test_channels__interleave_by_time_and_join_seams_per_channel() -> None:
    out = assemble(
        [
            record(seg("hello are you...", 0, "ch0"), channel="ch0"),
            record(seg("...there?", 10, "ch0"), channel="ch0"),
            record(seg("yes I am.", 2, "ch1"), seg("good.", 12, "ch1"), channel="ch1"),
        ]
    )
    assert [(s.channel, s.text) for s in out] == [
        ("ch0", " hello are you"),
        ("ch1", " yes I am."),
        ("ch0", " there?"),
        ("ch1", " good."),
    ]


def test_seam__a_capital_after_a_chunk_that_ended_inside_a_sentence_is_lowered() -> None:
    out = assemble(
        [record(seg("and the students", 0)), record(seg("Who helped them are proud.", 10))]
    )
    assert out[1].text == " who helped them are proud."
    kept = assemble([record(seg("we met", 0)), record(seg("Anna there, and Anna left.", 10))])
    assert kept[1].text == " Anna there, and Anna left."  # a name (capital inside a sentence)
