"""Redaction as chunks are stored (obstore's memory store): no record holds the unredacted
text, an entity across a seam is redacted whole, a resume transcribes the chunk whose record
held words back again and loses nothing, keepOriginal keeps the unredacted text under its own
keys; and the channels of a split file are labelled and interleaved."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import pytest

from recall.bucket import Bucket
from recall.media.media import CHANNEL_STRIDE
from recall.media.types import Chunk, Segment, Word
from recall.resources import Part, Phase, Progress, TranscriptionJob
from recall.transcripts import AttemptWriter, load_transcript, read_checkpoint
from recall.transcripts.formats import render
from recall.transcripts.garbage import JobView, garbage
from recall.transcripts.records import Record
from tests.unit.fakes import memory_bucket
from tests.unit.transcripts.test_store import CUT, TOKENS

SECRET = ["anna", "example", "five", "1234"]
CHUNKS = [
    "Hello and welcome to the call today. You can write to anna at",
    "example dot com or call five five five, one two three four. We talked about the weather",
    "and then about the trains for a while. That was all.",
]


def job(redact: dict[str, Any] | None, parts: list[Part] | None = None) -> TranscriptionJob:
    spec: dict[str, Any] = {"source": {"url": "file:///m.wav"}}
    if redact is not None:
        spec["transcript"] = {"redact": redact, "words": True}
    return TranscriptionJob.from_api(
        {
            "apiVersion": "recall.dev/v1alpha1",
            "kind": "TranscriptionJob",
            "metadata": {"name": "call", "namespace": "ns", "uid": "u-1"},
            "spec": spec,
            "status": {"progress": Progress.of(0, 0, parts).to_api()} if parts else {},
        }
    )


def chunk(i: int, n: int = len(CHUNKS), channel: str | None = None, offset: int = 0) -> Chunk:
    first = (offset + i) * 480_000
    return Chunk(
        index=offset + i,
        start=i * 30.0,
        duration=30.0,
        first=first,
        end=first + 480_000,
        tail=f"t{i}",
        last=offset + i == n - 1,
        channel=channel,
    )


def said(i: int, text: str = "") -> list[Segment]:
    """Chunk `i`'s text as one segment of timed words (as the engine's, absolute)."""
    parts = (text or CHUNKS[i]).split()
    step = 25.0 / len(parts)
    words = [
        Word(start=i * 30 + k * step, end=i * 30 + (k + 0.8) * step, text=" " + p, probability=0.9)
        for k, p in enumerate(parts)
    ]
    return [
        Segment(
            start=words[0].start,
            end=words[-1].end,
            text="".join(w.text for w in words),
            words=words,
        )
    ]


def everything(bucket: Bucket) -> str:
    return "\n".join((bucket.get(o.key) or b"").decode() for o in bucket.list())


TYPES = {"types": ["email", "phone"]}


def run(bucket: Bucket, spec: dict[str, Any] | None, chunks: range, attempt: int = 1,
        parts: list[Part] | None = None, finish: bool = True) -> AttemptWriter:  # fmt: skip
    j = job(spec, parts)
    w = AttemptWriter(bucket, j, attempt, TOKENS[attempt])
    carried = read_checkpoint(bucket, j) if parts else None
    w.begin(CUT, carried)
    for i in chunks:
        w.add(chunk(i), said(i))
    if finish:
        w.finish(90.0, "x", ["json", "aws.json", "srt", "vtt", "txt"])
    return w


def test_no_record_transcript_or_output_holds_the_unredacted_text() -> None:
    bucket = memory_bucket()
    w = run(bucket, TYPES, range(3))
    stored = everything(bucket)
    for secret in SECRET:
        assert secret not in stored.lower(), secret
    transcript = load_transcript(bucket, w.transcript_key)
    assert transcript is not None
    assert "[EMAIL] or call [PHONE]. We talked" in transcript.text
    assert transcript.text.startswith("Hello and welcome") and transcript.text.endswith("all.")
    assert transcript.redacted == ["email", "phone"]
    # A span counts as one word.
    assert transcript.words == sum(len(t.split()) for t in CHUNKS) - 5 + 1 - 7 + 1


def test_the_hold_rule__a_record_stores_none_of_an_entity_said_across_its_end() -> None:
    bucket = memory_bucket()
    w = run(bucket, TYPES, range(1), finish=False)
    (record,) = w.records
    assert "anna" not in record.text and record.held is not None
    assert record.text.endswith("welcome to the")  # the last 8 words held back


def test_resume_after_a_record_that_held_words__transcribes_its_chunk_again() -> None:
    bucket = memory_bucket()
    first = run(bucket, TYPES, range(2), finish=False)
    checkpoint = read_checkpoint(bucket, job(TYPES, first.parts()))
    assert checkpoint.retake and checkpoint.resume.chunks == 1  # chunk 1 again
    assert checkpoint.resume.position == chunk(1).first
    second = run(bucket, TYPES, range(1, 3), attempt=2, parts=first.parts())
    transcript = load_transcript(bucket, second.transcript_key)
    fresh = memory_bucket()
    unbroken = load_transcript(fresh, run(fresh, TYPES, range(3)).transcript_key)
    assert transcript is not None and unbroken is not None
    assert transcript.text == unbroken.text
    assert "anna" not in everything(bucket)


def test_keep_original__under_its_own_keys_and_kept_with_the_result() -> None:
    bucket = memory_bucket()
    w = run(bucket, {**TYPES, "keepOriginal": True}, range(3))
    original = load_transcript(bucket, w.directory + "original.json")
    assert original is not None and original.redacted is None
    assert "anna at example dot com" in original.text and "[EMAIL]" not in original.text
    keys = [o.key for o in bucket.list()]
    assert sum(k.endswith(".original.json") for k in keys) == 3
    done = JobView("ns", "call", "u-1", Phase.SUCCEEDED, 1, result=w.transcript_key)
    left = set(keys) - set(garbage(done, keys))
    assert left == {w.transcript_key, w.directory + "original.json"} | {
        k for k in keys if "/out." in k
    }


def test_without_redaction__records_hold_every_word() -> None:
    bucket = memory_bucket()
    w = run(bucket, None, range(3))
    assert "anna at example dot com" in everything(bucket)
    assert all(r.held is None for r in w.records)


def test_channels__labelled_and_interleaved_by_time() -> None:
    bucket = memory_bucket()
    j = job(None)
    w = AttemptWriter(bucket, j, 1, TOKENS[1])
    w.begin(CUT, None)
    w.add(chunk(0, 4, "ch0"), said(0, "hello is anyone there"))
    w.add(chunk(1, 4, "ch0"), said(1, "ok bye then"))
    w.add(chunk(0, 4, "ch1", offset=2), said(0, "yes I am here"))
    w.add(chunk(1, 4, "ch1", offset=2), said(1, "bye"))
    w.finish(60.0, "x", ["txt"])
    transcript = load_transcript(bucket, w.transcript_key)
    assert transcript is not None
    assert [s.channel for s in transcript.segments] == ["ch0", "ch1", "ch0", "ch1"]
    assert all(w.channel == s.channel for s in transcript.segments for w in s.words or [])
    txt = render(transcript, "txt")
    assert txt.startswith("ch0: hello is anyone there\n\nch1: yes I am here\n\n")
    assert Record.decode(bucket.get(w.directory + "c000002.json") or b"").channel == "ch1"


def test_a_store_write_repeated_after_a_lost_answer_stores_the_same_record() -> None:
    """The writer's state changes only once the chunk's write succeeded: the same chunk added
    again (the store's answer was lost) writes the same bytes."""
    bucket = memory_bucket()
    j = job({**TYPES, "keepOriginal": True})
    w = AttemptWriter(bucket, j, 1, TOKENS[1])
    w.begin(CUT, None)
    w.add(chunk(0), said(0))
    failing = memory_bucket()
    calls = {"n": 0}

    def put(key: str, data: bytes, *, once: bool = True) -> None:
        calls["n"] += 1
        if calls["n"] == 2:  # the chunk record's write, after the original's
            raise OSError("answer lost")
        failing.put(key, data, once=once)

    pending = list(w.pending)
    real = w.bucket
    w.bucket = type("Flaky", (), {"put": staticmethod(put), "get": real.get})()
    with contextlib.suppress(OSError):
        w.add(chunk(1), said(1))
    assert w.pending == pending and w.chunks == 1
    w.bucket = real
    w.add(chunk(1), said(1))
    assert w.chunks == 2


SHORT = ["Hello and welcome.", "My email is", "maria at example", "dot org. Thanks", "and bye now."]


def test_resume__held_words_that_go_back_over_short_chunks_are_all_transcribed_again() -> None:
    def add(w: AttemptWriter, i: int) -> None:
        w.add(chunk(i, len(SHORT)), said(i, SHORT[i]))

    first_bucket = memory_bucket()
    j = job(TYPES)
    first = AttemptWriter(first_bucket, j, 1, TOKENS[1])
    first.begin(CUT, None)
    for i in range(3):
        add(first, i)
    checkpoint = read_checkpoint(first_bucket, job(TYPES, first.parts()))
    assert checkpoint.retake > 1  # the held words begin two chunks back or more
    second = AttemptWriter(first_bucket, job(TYPES, first.parts()), 2, TOKENS[2])
    second.begin(CUT, checkpoint)
    for i in range(checkpoint.resume.chunks, len(SHORT)):
        add(second, i)
    second.finish(150.0, "x", ["txt"])
    fresh = memory_bucket()
    unbroken = AttemptWriter(fresh, j, 1, TOKENS[1])
    unbroken.begin(CUT, None)
    for i in range(len(SHORT)):
        add(unbroken, i)
    unbroken.finish(150.0, "x", ["txt"])
    resumed = load_transcript(first_bucket, second.transcript_key)
    whole = load_transcript(fresh, unbroken.transcript_key)
    assert resumed is not None and whole is not None
    assert (
        resumed.text == whole.text == "Hello and welcome. My email is [EMAIL]. Thanks and bye now."
    )


def test_translation__no_record_or_english_output_holds_an_entity_said_across_a_seam() -> None:
    """A number said across a chunk's end: its translation is held back with its words and
    redacted whole with the next chunk's, in the records and in en.txt and the json."""
    bucket = memory_bucket()
    w = AttemptWriter(bucket, job(TYPES), 1, TOKENS[1])
    w.begin(CUT, None)
    german = ["Hallo und willkommen heute zu unserer Sendung. Meine Nummer ist 0176", "5550123."]
    english = [" Hello and welcome to our show today. My number is 0176", " 5550123."]
    for i in range(2):
        (s,) = said(i, german[i])
        w.add(chunk(i, 2), [s.model_copy(update={"translation": english[i]})])
    w.finish(60.0, "x", ["json", "en.txt"])
    stored = everything(bucket)
    assert "0176" not in stored and "5550123" not in stored
    transcript = load_transcript(bucket, w.transcript_key)
    assert transcript is not None
    assert render(transcript, "en.txt").strip() == (
        "Hello and welcome to our show today. My number is [PHONE]."
    )


def test_resume__held_words_of_a_segment_without_word_timings_are_not_lost() -> None:
    """An engine that gives no word timings: the hold rule times the words in proportion, and
    the retake takes the held ones again the same way."""

    def attempt(bucket: Bucket, n: int, chunks: range, parts: list[Part] | None) -> AttemptWriter:
        w = AttemptWriter(bucket, job(TYPES, parts), n, TOKENS[n])
        w.begin(CUT, read_checkpoint(bucket, job(TYPES, parts)) if parts else None)
        for i in chunks:
            w.add(chunk(i), [s.model_copy(update={"words": None}) for s in said(i)])
        return w

    bucket = memory_bucket()
    first = attempt(bucket, 1, range(2), None)
    resume = read_checkpoint(bucket, job(TYPES, first.parts())).resume.chunks
    second = attempt(bucket, 2, range(resume, 3), first.parts())
    second.finish(90.0, "x", ["txt"])
    fresh = memory_bucket()
    unbroken = attempt(fresh, 1, range(3), None)
    unbroken.finish(90.0, "x", ["txt"])
    resumed, whole = (
        load_transcript(b, w.transcript_key) for b, w in ((bucket, second), (fresh, unbroken))
    )
    assert resumed is not None and whole is not None
    assert resumed.text == whole.text
    assert "We talked about the weather" in resumed.text and "anna" not in everything(bucket)


def timed(text: str, start: float) -> Segment:
    """`text` as one segment, a word every half second from `start`."""
    words = [
        Word(start=start + k / 2, end=start + k / 2 + 0.4, text=" " + p, probability=0.9)
        for k, p in enumerate(text.split())
    ]
    return Segment(start=start, end=words[-1].end, text="".join(w.text for w in words), words=words)


def test_channels__a_resume_keeps_the_words_the_channel_before_held() -> None:
    """The first chunk of the second channel has no speech: its record stores the words the
    first channel's last record held back (nothing is held across channels), so a resume after
    it loses none of them."""
    said_in = {  # (channel, chunk in it): segments
        (0, 0): [timed("Hello this is the caller speaking from home", 2.0)],
        (0, 1): [timed("and this is what the caller said to the agent today", 32.0)],
        (1, 0): [],
        (1, 1): [timed("Yes hello I am the agent answering late", 31.0)],
    }

    def channel_chunk(c: int, i: int) -> Chunk:
        first = c * CHANNEL_STRIDE + i * 480_000  # where a split file's channel counts from
        return dataclasses.replace(chunk(i, 4, f"ch{c}", 2 * c), first=first, end=first + 480_000)

    def attempt(
        bucket: Bucket, n: int, chunks: list[tuple[int, int]], parts: list[Part] | None
    ) -> AttemptWriter:
        w = AttemptWriter(bucket, job(TYPES, parts), n, TOKENS[n])
        w.begin(CUT, read_checkpoint(bucket, job(TYPES, parts)) if parts else None)
        for c, i in chunks:
            w.add(channel_chunk(c, i), said_in[(c, i)])
        return w

    bucket = memory_bucket()
    first = attempt(bucket, 1, list(said_in)[:3], None)
    assert first.records[1].held is not None  # the first channel's end held words back
    assert first.records[2].held is None and first.records[2].channel == "ch1"
    checkpoint = read_checkpoint(bucket, job(TYPES, first.parts()))
    assert checkpoint.retake == 0 and checkpoint.resume.chunks == 3
    second = attempt(bucket, 2, list(said_in)[3:], first.parts())
    second.finish(60.0, "x", ["txt"])
    transcript = load_transcript(bucket, second.transcript_key)
    assert transcript is not None
    assert "this is what the caller said to the agent today" in transcript.text


@pytest.mark.parametrize(
    "chunks",
    [
        [
            [timed("Hello and welcome to the show today my friends.", 1.0),
             timed("And now the students", 20.0)],
            [timed("Who helped them were great.", 31.0)],
        ],
        [[timed("so we went out to the old town to see the river", 1.0)], [],
         [timed("Bye.", 61.0)]],
    ],
)  # fmt: skip
def test_redaction__a_transcript_has_the_segments_and_seams_it_has_without(
    chunks: list[list[Segment]],
) -> None:
    """Words held back (through a silent chunk too) are one segment again with what they were
    cut from, and the seam rules apply at each chunk's own start, as without redaction."""

    def transcript(spec: dict[str, Any] | None) -> list[str]:
        bucket = memory_bucket()
        w = AttemptWriter(bucket, job(spec), 1, TOKENS[1])
        w.begin(CUT, None)
        for i, segments in enumerate(chunks):
            w.add(chunk(i, len(chunks)), segments)
        w.finish(30.0 * len(chunks), "x", ["txt"])
        loaded = load_transcript(bucket, w.transcript_key)
        assert loaded is not None
        return [s.text for s in loaded.segments]

    plain = transcript(None)
    assert plain[-1].split()[0] in ("who", "bye.")  # lowered at the seam
    assert transcript(TYPES) == plain
