"""Who said it in every output: speakers and channels in json, aws.json (AWS's speaker_labels
and channel_labels), vtt voice tags, srt and txt prefixes at each change; a cue never mixes two
speakers; a word Whisper split at a hyphen is one item."""

from __future__ import annotations

import json

import pytest

from bench.cues import check, parse
from recall.media.types import Segment, Word
from recall.transcripts import Transcript
from recall.transcripts.formats import render
from recall.transcripts.records import Record
from recall.transcripts.redact import text_of_words
from recall.transcripts.subtitles import Rules, cues


def w(start: float, text: str, speaker: str | None = None, p: float = 0.9) -> Word:
    return Word(start=start, end=start + 0.4, text=text, probability=p, speaker=speaker)


def seg(words: list[Word], speaker: str | None = None, channel: str | None = None) -> Segment:
    return Segment(
        start=words[0].start,
        end=words[-1].end,
        text="".join(x.text for x in words),
        confidence=0.8,
        words=words,
        speaker=speaker,
        channel=channel,
    )


# Two speakers inside one segment (Whisper's segments do not follow turns), then a third.
DIALOGUE = Transcript(
    segments=[
        seg(
            [
                w(0.0, " Hello", "S1"),
                w(0.5, " there.", "S1"),
                w(1.0, " Hi,", "S2"),
                w(1.5, " how", "S2"),
                w(2.0, " are", "S2"),
                w(2.5, " you?", "S2"),
            ],
            speaker="S2",
        ),
        seg([w(4.0, " Fine", "S1"), w(4.5, " thanks.", "S1")], speaker="S1"),
    ],
    duration=5.0,
    engine="whisper/tiny.en",
    job="talk",
    word_timings=True,
)


def test_json__segments_and_words_carry_their_speaker() -> None:
    data = json.loads(render(DIALOGUE, "json"))
    assert [s["speaker"] for s in data["segments"]] == ["S2", "S1"]
    assert [x["speaker"] for x in data["segments"][0]["words"]] == ["S1"] * 2 + ["S2"] * 4


def test_json__words_only_when_the_job_asked() -> None:
    unasked = Transcript(segments=DIALOGUE.segments, duration=5.0, engine="x")
    data = json.loads(render(unasked, "json"))
    assert all("words" not in s for s in data["segments"]) and data["wordTimings"] is False


def test_aws_json__speaker_labels_as_aws_writes_them() -> None:
    results = json.loads(render(DIALOGUE, "aws.json"))["results"]
    said = [i for i in results["items"] if i["type"] == "pronunciation"]
    assert [i["speaker_label"] for i in said] == ["spk_0"] * 2 + ["spk_1"] * 4 + ["spk_0"] * 2
    labels = results["speaker_labels"]
    assert labels["speakers"] == 2
    turns = labels["segments"]
    assert [(t["speaker_label"], t["start_time"], t["end_time"]) for t in turns] == [
        ("spk_0", "0.0", "0.9"),
        ("spk_1", "1.0", "2.9"),
        ("spk_0", "4.0", "4.9"),
    ]
    assert turns[1]["items"][0] == {
        "start_time": "1.0",
        "speaker_label": "spk_1",
        "end_time": "1.4",
    }
    assert [s["speaker_label"] for s in results["audio_segments"]] == ["spk_1", "spk_0"]


def test_vtt__a_voice_tag_per_cue_and_no_cue_mixes_speakers() -> None:
    out = render(DIALOGUE, "vtt")
    found = parse(out, "vtt")
    assert "<v S1>Hello there." in out and "<v S2>Hi, how are you?" in out
    assert len(found) == 3


def test_srt__the_speaker_before_each_change() -> None:
    out = render(DIALOGUE, "srt")
    texts = [c.text for c in parse(out, "srt")]
    assert texts == ["S1: Hello there.", "S2: Hi, how are you?", "S1: Fine thanks."]


def test_srt__no_second_prefix_while_the_speaker_goes_on() -> None:
    long = [w(i * 0.5, f" word{i}", "S1") for i in range(30)]
    t = Transcript(segments=[seg(long)], duration=16, engine="x", word_timings=True)
    texts = [c.text for c in parse(render(t, "srt"), "srt")]
    assert len(texts) > 1 and texts[0].startswith("S1: ")
    assert not any(x.startswith("S1: ") for x in texts[1:])


def test_cues__never_mix_two_speakers_even_when_they_would_fit() -> None:
    found = cues(DIALOGUE.segments, Rules())
    assert [c.who for c in found] == ["S1", "S2", "S1"]
    assert check(found) == []


def test_txt__a_paragraph_a_turn() -> None:
    assert render(DIALOGUE, "txt") == (
        "S1: Hello there.\n\nS2: Hi, how are you?\n\nS1: Fine thanks.\n"
    )


def test_txt__unchanged_without_speakers() -> None:
    plain = Transcript(segments=[Segment(start=0, end=1, text=" a b.")], duration=1, engine="x")
    assert render(plain, "txt") == "a b.\n"


def test_hyphen_split_words_are_one_item() -> None:
    words = [
        w(0.0, " An"),
        w(0.3, " ill"),
        w(0.6, "-disposed,", p=0.5),
        w(1.2, " cold"),
        w(1.5, "-hearted"),
        w(1.9, " man."),
    ]
    t = Transcript(segments=[seg(words)], duration=3, engine="x", word_timings=True)
    items = json.loads(render(t, "aws.json"))["results"]["items"]
    said = [i["alternatives"][0]["content"] for i in items if i["type"] == "pronunciation"]
    assert said == ["An", "ill-disposed", "cold-hearted", "man"]
    joined = next(i for i in items if i["alternatives"][0]["content"] == "ill-disposed")
    assert (joined["start_time"], joined["end_time"]) == ("0.3", "1.0")
    assert joined["alternatives"][0]["confidence"] == "0.5"  # the lower of the two
    assert "ill-disposed, cold-hearted man." in render(t, "srt")


def test_channels__labels_in_every_output() -> None:
    left = seg([w(0.0, " Hello?"), w(0.5, " Anyone?")], channel="ch0")
    right = seg([w(0.7, " Yes,"), w(1.2, " here.")], channel="ch1")
    t = Transcript(segments=[left, right], duration=2, engine="x", word_timings=True)
    results = json.loads(render(t, "aws.json"))["results"]
    assert results["channel_labels"]["number_of_channels"] == 2
    assert [c["channel_label"] for c in results["channel_labels"]["channels"]] == ["ch_0", "ch_1"]
    assert "speaker_labels" not in results
    assert render(t, "txt") == "ch0: Hello? Anyone?\n\nch1: Yes, here.\n"
    assert "<v ch1>Yes, here." in render(t, "vtt")
    assert json.loads(render(t, "json"))["segments"][1]["channel"] == "ch1"


def test_record_and_transcript__round_trip_speakers_channels_and_redactions() -> None:
    words = [
        Word(start=0, end=1, text=" [PHONE]", probability=0.4, speaker="S2", redacted="phone"),
        Word(start=1, end=2, text=" ok", probability=0.9, channel="ch1"),
    ]
    segment = Segment(start=0, end=2, text=" [PHONE] ok", words=words, speaker="S2")
    record = Record(0, 10, "t", [segment], channel="ch1", held=1.5, carried=True)
    assert Record.decode(record.encode()) == record
    t = Transcript(segments=[segment], duration=2, engine="x", redacted=["phone"])
    assert Transcript.decode(t.encode()) == t


def test_a_word_whisper_wrote_in_pieces_is_one_item() -> None:
    words = [w(0.0, " Write"), w(0.5, " to"), w(1.0, " example"), w(1.4, ".com."), w(2.0, " 555")]
    words.append(w(2.4, "-1234.", p=0.6))
    t = Transcript(segments=[seg(words)], duration=3, engine="x", word_timings=True)
    items = json.loads(render(t, "aws.json"))["results"]["items"]
    said = [i["alternatives"][0]["content"] for i in items if i["type"] == "pronunciation"]
    assert said == ["Write", "to", "example.com", "555-1234"]
    assert "Write to example.com. 555-1234." in render(t, "srt")


def test_txt__a_word_written_in_pieces_is_one_word_in_each_turn() -> None:
    words = [w(0.0, " Visit", "S1"), w(0.5, " example", "S1"), w(0.9, ".com", "S1")]
    words.append(w(1.5, " now.", "S1"))
    t = Transcript(segments=[seg(words, speaker="S1")], duration=2, engine="x", word_timings=True)
    assert render(t, "txt") == "S1: Visit example.com now.\n"


def test_channels__speaking_at_once_each_channel_keeps_its_own_times() -> None:
    """A long turn on one channel and a short answer on the other said during it: each cue is
    shown when its words are said, the cues of the two channels overlapping."""
    long = [w(0.6 * k, f" word{k}") for k in range(20)]  # 0 to 12 s
    left = seg(long, channel="ch0")
    right = seg([w(1.0, " Right.")], channel="ch1")
    later = seg([w(12.5, " Okay"), w(13.0, " then.")], channel="ch1")
    t = Transcript(segments=[left, right, later], duration=14, engine="x", word_timings=True)
    found = cues(t.segments)
    assert check(found) == []
    answer = next(c for c in found if "Right." in c.text)
    assert answer.channel == "ch1" and answer.start == 1.0
    for c in found:  # every cue shown while its words are said
        said = [x for s in t.segments if s.channel == c.channel for x in s.words or []]
        first = next(x for x in said if x.text.strip() in c.text.split()[0])
        assert c.start == pytest.approx(first.start, abs=0.001)
    assert [c.start for c in found] == sorted(c.start for c in found)
    srt = render(t, "srt")
    assert "ch1: Right." in srt and srt.count("ch0: ") >= 2  # labelled at each change


def test_unspaced_scripts__words_written_as_whisper_wrote_them() -> None:
    """Japanese: Whisper's words have no spaces between them (the first may have one)."""
    said = [
        "今日",
        "は",
        "とても",
        "良い",
        "天気",
        "です。",
        "明日",
        "も",
        "晴れ",
        "る",
        "でしょう。",
    ]
    words = [w(0.8 * k, (" " if k == 0 else "") + x) for k, x in enumerate(said)]
    t = Transcript(segments=[seg(words)], duration=9, engine="x", word_timings=True, language="ja")
    assert render(t, "txt") == "今日はとても良い天気です。明日も晴れるでしょう。\n"
    assert "今日はとても良い天気です。" in render(t, "vtt")
    found = cues(t.segments)
    assert check(found) == [] and found[-1].end >= 8.0  # no cue cut short of the speech
    items = json.loads(render(t, "aws.json"))["results"]["items"]
    assert [i["alternatives"][0]["content"] for i in items if i["type"] == "pronunciation"][:3] == [
        "今日",
        "は",
        "とても",
    ]
    # Where Whisper wrote a space (Thai between phrases), it stays.
    thai = seg([w(0.0, " สวัสดี"), w(0.5, "ครับ"), w(1.0, " ผม")])
    t = Transcript(segments=[thai], duration=2, engine="x", word_timings=True, language="th")
    assert render(t, "txt") == "สวัสดีครับ ผม\n"


def test_unspaced_scripts__without_word_timings_a_line_breaks_between_characters() -> None:
    text = "今日はとても良い天気です明日も晴れるでしょうそれではまた会いましょう皆さんさようなら"
    segment = Segment(start=0.0, end=12.0, text=text, confidence=0.8)
    found = cues([segment])
    assert check(found) == []
    assert "".join(line for c in found for line in c.lines) == text
    wide = Rules().max_line_characters // 2  # a wide character is two columns
    assert all(len(line) <= wide for c in found for line in c.lines)
    assert not any(line.startswith(("。", "、", "ょ")) for c in found for line in c.lines)


def test_aws_json__a_piece_is_not_glued_to_another_speakers_word() -> None:
    words = [w(0.0, " Call", "S1"), w(0.5, " me", "S1"), w(1.0, ".", "S2"), w(1.5, " Sure.", "S2")]
    t = Transcript(segments=[seg(words)], duration=2, engine="x", word_timings=True)
    items = json.loads(render(t, "aws.json"))["results"]["items"]
    assert [(i["alternatives"][0]["content"], i["speaker_label"]) for i in items][:3] == [
        ("Call", "spk_0"),
        ("me", "spk_0"),
        (".", "spk_1"),
    ]


def test_redaction__a_changed_unspaced_text_keeps_no_spaces() -> None:
    said = [Word(start=k, end=k + 0.5, text=x, probability=0.9) for k, x in enumerate("電話は番号")]
    assert text_of_words(said) == " 電話は番号"
    latin = [Word(start=0, end=1, text="call", probability=0.9)]
    assert text_of_words([*latin, *latin]) == " call call"


def test_srt__the_last_cue_is_not_held_past_the_audio() -> None:
    words = [
        w(0.0, " Hello"),
        w(0.5, " there."),
        Word(start=9.8, end=9.95, text=" Bye.", probability=0.9),
    ]
    t = Transcript(segments=[seg(words)], duration=10.0, engine="x", word_timings=True)
    found = parse(render(t, "srt"), "srt")
    assert found[-1].end == 10.0 and found[-1].start == 9.8
    assert found[0].end >= 1.0  # the shortest time still holds where the audio goes on


def test_aws_json__the_items_of_channels_speaking_at_once_in_time_order() -> None:
    left = seg([w(0.0, " I"), w(2.4, " said,"), w(3.0, " yes.")], channel="ch0")
    right = seg([w(1.0, " Right.")], channel="ch1")
    t = Transcript(segments=[left, right], duration=4, engine="x", word_timings=True)
    results = json.loads(render(t, "aws.json"))["results"]
    items = results["items"]
    assert [i["id"] for i in items] == list(range(len(items)))
    said = [(i["alternatives"][0]["content"], i.get("start_time")) for i in items]
    first = [("I", "0.0"), ("Right", "1.0"), (".", None), ("said", "2.4"), (",", None)]
    assert said == [*first, ("yes", "3.0"), (".", None)]
    by_id = {i["id"]: i for i in items}
    for segment in results["audio_segments"]:  # each segment still names its own items
        assert {by_id[i]["channel_label"] for i in segment["items"]} == {segment["channel_label"]}


def test_subtitles__a_backslash_in_a_word_is_written_as_said() -> None:
    words = [w(0.0, " open"), w(0.5, " C:\\new\\Notes"), w(1.0, " a\\hb")]
    t = Transcript(segments=[seg(words)], duration=2, engine="x", word_timings=True)
    for fmt in ("srt", "vtt"):
        assert "open C:\\new\\Notes a\\hb\n" in render(t, fmt)


def test_srt__a_long_last_word_is_still_shown_at_most_the_longest_time() -> None:
    words = [Word(start=0.0, end=12.0, text=" Hmmmm.", probability=0.9)]
    t = Transcript(segments=[seg(words)], duration=20.0, engine="x", word_timings=True)
    found = parse(render(t, "srt"), "srt")
    assert check(found) == [] and found[-1].end == 7.0


def test_srt__a_channels_label_counts_toward_its_line() -> None:
    said = [
        w(0.4 * k, f" {x}")
        for k, x in enumerate(["Thanks", "everyone", "for", "joining", "us", "today."])
    ]
    other = seg([w(5.0, " Sure.")], channel="ch1")
    t = Transcript(
        segments=[seg(said, channel="ch0"), other],
        duration=6,
        engine="x",
        word_timings=True,
        subtitles=Rules(max_line_characters=37, max_lines=1).to_data(),
    )
    found = parse(render(t, "srt"), "srt")
    assert all(len(line) <= 37 for c in found for line in c.lines)
    assert all(c.lines[0].startswith(("ch0: ", "ch1: ")) for c in found)


def test_aws_json__a_segments_marks_before_its_first_word_stay_at_its_start() -> None:
    left = seg([w(0.0, " I"), w(2.4, " said.")], channel="ch0")
    right = seg([w(1.0, "..."), w(1.2, " Right.")], channel="ch1")
    t = Transcript(segments=[left, right], duration=4, engine="x", word_timings=True)
    items = json.loads(render(t, "aws.json"))["results"]["items"]
    said = [(i["alternatives"][0]["content"], i["channel_label"]) for i in items]
    assert said[:5] == [
        ("I", "ch_0"),
        (".", "ch_1"),
        (".", "ch_1"),
        (".", "ch_1"),
        ("Right", "ch_1"),
    ]
