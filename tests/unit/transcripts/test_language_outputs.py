"""Languages and the English translation in the outputs: each segment's language in json and
aws.json (language_code per item, language_identification as AWS writes them), the translation
as en.srt, en.vtt, en.txt and the json's translation, which outputs a job writes, and the
segment fields kept through the stored layout."""

from __future__ import annotations

import json
from typing import Any

import pysubs2

from recall.media.types import Segment
from recall.resources import TranscriptionJob
from recall.transcripts import Transcript, output_formats, render
from recall.transcripts.records import decode_segment, encode_segment
from recall.transcripts.redact import redact

SWITCHED = Transcript(
    segments=[
        Segment(
            start=0.0, end=4.0, text="Guten Morgen.", language="de", translation="Good morning."
        ),
        Segment(start=5.0, end=7.0, text="Buenos días.", language="es", translation="Good day."),
        Segment(
            start=8.0, end=12.0, text="Wie geht es?", language="de", translation="How are you?"
        ),
    ],
    duration=12.5,
    engine="whisper/base",
    job="talk",
    language="de",
)


def test_json__segment_languages_and_the_translation_with_the_segments_times() -> None:
    data = json.loads(render(SWITCHED, "json"))
    assert [s["language"] for s in data["segments"]] == ["de", "es", "de"]
    assert data["translation"]["language"] == "en"
    assert data["translation"]["text"] == "Good morning. Good day. How are you?"
    assert [(s["start"], s["end"]) for s in data["translation"]["segments"]] == [
        (0.0, 4.0),
        (5.0, 7.0),
        (8.0, 12.0),
    ]


def test_aws_json__language_code_per_item_and_language_identification() -> None:
    results = json.loads(render(SWITCHED, "aws.json"))["results"]
    spoken = [i for i in results["items"] if i["type"] == "pronunciation"]
    assert [i["language_code"] for i in spoken] == ["de-DE"] * 2 + ["es-ES"] * 2 + ["de-DE"] * 3
    assert results["language_code"] == "de-DE"
    identified = results["language_identification"]
    assert [x["code"] for x in identified] == ["de-DE", "es-ES"]  # by share of the speech
    assert float(identified[0]["score"]) == 0.8 and float(identified[1]["score"]) == 0.2


def test_aws_json__a_detected_file_language_with_its_probability() -> None:
    one = Transcript(
        segments=[Segment(start=0.0, end=2.0, text="Ciao a tutti.")],
        duration=2.0,
        engine="whisper/base",
        language="it",
        language_probability=0.93,
    )
    results = json.loads(render(one, "aws.json"))["results"]
    assert results["language_identification"] == [{"score": "0.93", "code": "it-IT"}]
    assert {i["language_code"] for i in results["items"] if i["type"] == "pronunciation"} == {
        "it-IT"
    }


def test_translated_outputs__srt_vtt_txt_in_english_at_the_segments_times() -> None:
    srt = pysubs2.SSAFile.from_string(render(SWITCHED, "en.srt"), format_="srt")
    # Cues follow the subtitle rules (two short sentences 1 s apart share one cue).
    assert " ".join(e.plaintext for e in srt) == "Good morning. Good day. How are you?"
    assert (srt[0].start, srt[0].end, srt[-1].end) == (0, 4000, 12000)
    assert render(SWITCHED, "en.vtt").startswith("WEBVTT")
    assert "How are you?" in render(SWITCHED, "en.vtt")
    assert render(SWITCHED, "en.txt") == "Good morning. Good day. How are you?\n"


def test_output_formats__the_translation_beside_each_subtitle_and_text_format() -> None:
    spec: dict[str, Any] = {"source": {"url": "file:///media/a.wav"}}
    job = {"metadata": {"name": "talk", "namespace": "ns"}, "spec": spec}
    spec["output"] = {"url": "file:///out/{key}", "formats": ["json", "srt", "txt"]}
    assert output_formats(TranscriptionJob.from_api(job)) == ["json", "srt", "txt"]
    spec["transcript"] = {"translate": "en"}
    assert output_formats(TranscriptionJob.from_api(job)) == [
        "json",
        "srt",
        "txt",
        "en.srt",
        "en.txt",
    ]


def test_layout__a_segments_language_and_translation_are_stored() -> None:
    for s in SWITCHED.segments:
        assert decode_segment(json.loads(json.dumps(encode_segment(s)))) == s
    plain = Segment(start=0.0, end=1.0, text="Hello.")
    assert encode_segment(plain) == [0.0, 1.0, "Hello."]  # nothing added when unset


def test_translation__redacted_and_labelled_as_its_segment() -> None:
    segment = Segment(
        start=0.0,
        end=5.0,
        text=" Meine Nummer ist fünf fünf fünf, eins zwei drei vier.",
        speaker="S2",
        translation=" My number is 555-1234, and my email is anna at example dot com.",
    )
    (done,) = redact([segment], {"phone", "email"})
    assert done.translation == " My number is [PHONE], and my email is [EMAIL]."
    english = render(Transcript(segments=[done], duration=5.0, engine="whisper/base"), "en.vtt")
    assert "<v S2>" in english and "[PHONE]" in english and "555" not in english


def test_vtt__each_cue_in_its_segments_language_srt_without_markup() -> None:
    vtt = render(SWITCHED, "vtt")
    assert "<lang de>Guten Morgen.</lang>" in vtt
    assert "<lang es>Buenos días.</lang>" in vtt
    assert "<lang de>Wie geht es?</lang>" in vtt
    texts = [e.plaintext for e in pysubs2.SSAFile.from_string(vtt, format_="vtt")]
    assert texts == ["Guten Morgen.", "Buenos días.", "Wie geht es?"]  # players read the text
    assert "<lang" not in render(SWITCHED, "srt")  # SubRip has no language markup


def test_cues__never_mix_two_languages_and_the_span_sits_inside_the_voice() -> None:
    close = Transcript(
        segments=[
            Segment(start=0.0, end=1.0, text="Guten Morgen,", language="de", speaker="S1"),
            Segment(start=1.1, end=2.0, text="buenos días.", language="es", speaker="S1"),
        ],
        duration=2.5,
        engine="whisper/base",
        job="talk",
    )
    vtt = render(close, "vtt")  # one short cue would hold both: two languages make two
    assert "<v S1><lang de>Guten Morgen,</lang>" in vtt
    assert "<v S1><lang es>buenos días.</lang>" in vtt
    one = Transcript(
        segments=[Segment(start=0.0, end=1.0, text="Hello.")], duration=1.0, engine="whisper"
    )
    assert "<lang" not in render(one, "vtt")  # file scope: the segments carry no language
