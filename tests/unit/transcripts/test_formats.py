from __future__ import annotations

import json

import pytest

from recall.media.types import Segment
from recall.transcripts import Transcript
from recall.transcripts.formats import render, timestamp

T = Transcript(
    segments=[
        Segment(start=0.0, end=1.5, text=" hello there."),
        Segment(start=3661.25, end=3662.0, text="general kenobi."),
    ],
    duration=3662.0,
    engine="whisper/tiny.en",
)


@pytest.mark.parametrize(
    ("seconds", "sep", "expected"),
    [
        (0, ",", "00:00:00,000"),
        (1.5, ".", "00:00:01.500"),
        (3661.2504, ",", "01:01:01,250"),
        (-1, ",", "00:00:00,000"),
    ],
)
def test_timestamp(seconds: float, sep: str, expected: str) -> None:
    assert timestamp(seconds, sep) == expected


def test_render__srt() -> None:
    assert render(T, "srt") == (
        "1\n00:00:00,000 --> 00:00:01,500\nhello there.\n\n"
        "2\n01:01:01,250 --> 01:01:02,000\ngeneral kenobi.\n"
    )


def test_render__vtt() -> None:
    out = render(T, "vtt")
    assert out.startswith("WEBVTT\n\n00:00:00.000 --> 00:00:01.500\nhello there.\n")


def test_render__txt_and_json() -> None:
    assert render(T, "txt") == "hello there. general kenobi.\n"
    data = json.loads(render(T, "json"))
    assert data["engine"] == "whisper/tiny.en" and len(data["segments"]) == 2
