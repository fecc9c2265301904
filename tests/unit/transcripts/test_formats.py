from __future__ import annotations

import dataclasses
import json

from bench.cues import check, parse
from recall.media.types import Segment, Word
from recall.transcripts import Transcript
from recall.transcripts.formats import render

T = Transcript(
    segments=[
        Segment(start=0.0, end=1.5, text=" hello there."),
        Segment(start=3661.25, end=3662.0, text="general kenobi."),
    ],
    duration=3662.0,
    engine="whisper/tiny.en",
)

WORDS = Transcript(
    segments=[
        Segment(
            start=0.5,
            end=2.0,
            text=" Hello, Zarvethia!",
            confidence=0.8,
            words=[
                Word(start=0.5, end=0.9, text=" Hello,", probability=0.99),
                Word(start=1.1, end=2.0, text=" Zarvethia!", probability=0.42),
            ],
        ),
        Segment(start=2.5, end=3.0, text=" Yes.", confidence=0.9),
    ],
    duration=3.5,
    engine="whisper/tiny.en",
    job="talk",
    language="en",
    word_timings=True,
    model="tiny.en",
    model_digest="sha256:" + "ab" * 32,
)


def test_render__srt_reparsed_by_the_library() -> None:
    out = render(T, "srt")
    assert out.startswith("1\n00:00:00,000 --> 00:00:01,500\nhello there.\n\n2\n01:01:01,250 --> ")
    cues = parse(out, "srt")
    assert [c.text for c in cues] == ["hello there.", "general kenobi."]
    assert cues[1].start == 3661.25 and cues[1].end == 3662.0  # not lengthened past the audio
    assert check(cues) == []


def test_render__vtt() -> None:
    out = render(T, "vtt")
    assert out.startswith("WEBVTT\n\n1\n00:00:00.000 --> 00:00:01.500\nhello there.\n")
    assert [c.text for c in parse(out, "vtt")] == ["hello there.", "general kenobi."]


def test_render__vtt_escapes_markup() -> None:
    t = Transcript(segments=[Segment(start=0, end=2, text="a < b & c")], duration=2, engine="x")
    assert "a &lt; b &amp; c" in render(t, "vtt")


def test_render__txt_and_json() -> None:
    assert render(T, "txt") == "hello there. general kenobi.\n"
    data = json.loads(render(T, "json"))
    assert data["engine"] == "whisper/tiny.en" and len(data["segments"]) == 2
    assert data["wordTimings"] is False and "words" not in data["segments"][0]


def test_render__json_shows_words_and_confidence() -> None:
    data = json.loads(render(WORDS, "json"))
    first = data["segments"][0]
    assert first["confidence"] == 0.8
    assert first["words"][1] == {
        "start": 1.1,
        "end": 2.0,
        "word": " Zarvethia!",
        "probability": 0.42,
    }
    assert data["modelDigest"] == WORDS.model_digest and data["language"] == "en"
    assert "words" not in data["segments"][1]  # " Yes." has none: split in proportion
    assert data["wordTimings"] is False  # so not every segment has its words


def test_render__aws_json_layout() -> None:
    data = json.loads(render(WORDS, "aws.json"))
    assert data["jobName"] == "talk" and data["status"] == "COMPLETED"
    results = data["results"]
    assert results["transcripts"] == [{"transcript": "Hello, Zarvethia! Yes."}]
    assert results["language_code"] == "en-US"  # as AWS writes it: a locale
    items = results["items"]
    assert [(i["type"], i["alternatives"][0]["content"]) for i in items] == [
        ("pronunciation", "Hello"),
        ("punctuation", ","),
        ("pronunciation", "Zarvethia"),
        ("punctuation", "!"),
        ("pronunciation", "Yes"),
        ("punctuation", "."),
    ]
    assert items[0]["start_time"] == "0.5" and items[0]["end_time"] == "0.9"
    assert items[2]["alternatives"][0]["confidence"] == "0.42"
    assert "start_time" not in items[1] and items[1]["alternatives"][0]["confidence"] == "0.0"
    # A segment without words: its one word spans it, with the segment's confidence.
    assert (items[4]["start_time"], items[4]["end_time"]) == ("2.5", "3.0")
    assert items[4]["alternatives"][0]["confidence"] == "0.9"
    assert [i["id"] for i in items] == list(range(6))
    assert [s["items"] for s in results["audio_segments"]] == [[0, 1, 2, 3], [4, 5]]


def test_transcript__round_trips_words_and_reads_format_1() -> None:
    again = Transcript.decode(WORDS.encode())
    assert again == WORDS
    old = json.dumps(
        {"format": 1, "durationSeconds": 2.0, "engine": "x", "segments": [[0, 1.0, "hi"]]}
    ).encode()
    legacy = Transcript.decode(old)
    assert legacy.segments == [Segment(start=0, end=1.0, text="hi")]
    assert legacy.segments[0].words is None and not legacy.word_timings


# The job asked for words; the engine aligned none for the second segment (`words=[]`, as an
# OpenAI-compatible server without word timestamps answers) and none for the third (None).
PARTIAL = Transcript(
    segments=[
        WORDS.segments[0],
        Segment(start=2.5, end=4.5, text=" Quite so.", confidence=0.7, words=[]),
        Segment(start=5.0, end=6.0, text=" Yes.", confidence=0.9),
    ],
    duration=6.5,
    engine="openai/whisper-1",
    job="talk",
    word_timings=True,
)


def test_render__json_says_which_segments_have_words() -> None:
    """`wordTimings` is what the segments hold, not what the job asked: a segment without
    word timings has no `words`, and one such segment makes `wordTimings` false."""
    data = json.loads(render(PARTIAL, "json"))
    assert [("words" in s) for s in data["segments"]] == [True, False, False]
    assert data["wordTimings"] is False
    timed = dataclasses.replace(WORDS, segments=WORDS.segments[:1])
    assert json.loads(render(timed, "json"))["wordTimings"] is True
    empty = Transcript(segments=[], duration=1.0, engine="x", word_timings=True)
    assert json.loads(render(empty, "json"))["wordTimings"] is True  # as asked: nothing to time


def test_render__aws_json_and_subtitles_keep_segments_with_empty_words() -> None:
    """A segment with text and `words=[]` is split in proportion, as one with None: its
    words are in aws.json (with the segment's confidence), srt and vtt."""
    results = json.loads(render(PARTIAL, "aws.json"))["results"]
    words = [
        i["alternatives"][0]["content"] for i in results["items"] if i["type"] == "pronunciation"
    ]
    assert words == ["Hello", "Zarvethia", "Quite", "so", "Yes"]
    quite = next(i for i in results["items"] if i["alternatives"][0]["content"] == "Quite")
    assert (quite["start_time"], quite["alternatives"][0]["confidence"]) == ("2.5", "0.7")
    assert [len(s["items"]) for s in results["audio_segments"]] == [4, 3, 2]
    for fmt in ("srt", "vtt"):
        text = " ".join(c.text.replace("\n", " ") for c in parse(render(PARTIAL, fmt), fmt))
        assert text == "Hello, Zarvethia! Quite so. Yes."
