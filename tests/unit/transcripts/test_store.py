"""An attempt's objects in a results store (obstore's memory store): write once, read back,
resume from a checkpoint exactly where it ended."""

from __future__ import annotations

from dataclasses import replace

import pytest

from recall.bucket import Bucket, StoreConflict
from recall.media.media import CHANNEL_STRIDE
from recall.media.types import Chunk, Cutting, Segment, Word
from recall.resources import Output, Part, Progress, TranscriptionJob
from recall.transcripts import (
    MAX_PARTS,
    AttemptWriter,
    CheckpointUnusable,
    Transcript,
    chunk_key,
    load_transcript,
    output_key,
    parse_scratch,
    read_checkpoint,
)
from recall.transcripts.checkpoint import follows
from recall.transcripts.records import Record
from tests.unit.fakes import memory_bucket

CUT = Cutting(chunk_seconds=30, snap_seconds=2, rate=16000, source="sha256:abc")
TOKENS = [f"{i:032x}" for i in range(0, 20)]


def job(parts: list[Part] | None = None, **spec: object) -> TranscriptionJob:
    return TranscriptionJob.from_api(
        {
            "apiVersion": "recall.dev/v1alpha1",
            "kind": "TranscriptionJob",
            "metadata": {"name": "talk", "namespace": "ns", "uid": "u-1"},
            "spec": {"source": {"url": "file:///m.wav"}, **spec},
            "status": {"progress": Progress.of(0, 0, parts).to_api()} if parts else {},
        }
    )


def chunk(i: int, samples: int = 480_000) -> Chunk:
    return Chunk(
        index=i,
        start=i * 30.0,
        duration=30.0,
        first=i * samples,
        end=(i + 1) * samples,
        tail=f"t{i}",
    )


def segments(i: int, text: str = "word") -> list[Segment]:
    return [Segment(start=i * 30.0, end=i * 30.0 + 2, text=f"{text} {i}")]


def write(
    bucket: Bucket, attempt: int, chunks: range, parts: list[Part] | None = None
) -> list[Part]:
    w = AttemptWriter(bucket, job(parts), attempt, TOKENS[attempt])
    carried = read_checkpoint(bucket, job(parts)) if parts else None
    out = w.begin(CUT, carried)
    for i in chunks:
        out = w.add(chunk(i), segments(i))
    return out


def test_an_attempt_writes_under_its_own_key_and_names_its_chunks_in_parts() -> None:
    bucket = memory_bucket()
    parts = write(bucket, 1, range(3))
    assert parts == [Part(attempt=1, token=TOKENS[1], first=0, end=3)]
    keys = sorted(o.key for o in bucket.list())
    assert keys[0] == f"scratch/ns/talk/u-1/a1-{TOKENS[1]}/c000000.json"
    assert all(parse_scratch(k) is not None for k in keys)
    assert {parse_scratch(k).attempt for k in keys} == {1}  # type: ignore[union-attr]


def test_resume__continues_after_the_last_stored_chunk_across_attempts() -> None:
    bucket = memory_bucket()
    first = write(bucket, 1, range(2))
    second = write(bucket, 2, range(2, 4), parts=first)
    assert second == [*first, Part(attempt=2, token=TOKENS[2], first=2, end=4)]
    checkpoint = read_checkpoint(bucket, job(second))
    assert checkpoint.chunks == 4
    assert checkpoint.resume.position == 4 * 480_000
    assert checkpoint.resume.tail == "t3"
    assert [s.text for r in checkpoint.records for s in r.segments] == [
        f"word {i}" for i in range(4)
    ]


def test_resume__a_missing_chunk_ends_what_can_be_reused() -> None:
    bucket = memory_bucket()
    parts = write(bucket, 1, range(4))
    bucket.delete([chunk_key(f"scratch/ns/talk/u-1/a1-{TOKENS[1]}/", 2)])
    checkpoint = read_checkpoint(bucket, job(parts))
    assert checkpoint.chunks == 2
    assert checkpoint.parts == (Part(attempt=1, token=TOKENS[1], first=0, end=2),)


def test_resume__stops_at_a_gap_in_the_cuts() -> None:
    bucket = memory_bucket()
    w = AttemptWriter(bucket, job(), 1, TOKENS[1])
    w.begin(CUT, None)
    w.add(chunk(0), segments(0))
    gap = Chunk(index=1, start=40.0, duration=30.0, first=600_000, end=1_000_000)
    parts = w.add(gap, segments(1))
    assert read_checkpoint(bucket, job(parts)).chunks == 1


def test_resume__a_file_split_by_channel_continues_in_the_channel_after_the_last_record() -> None:
    """Channel c's chunks count their samples from c × CHANNEL_STRIDE: the first chunk of the
    next channel follows the last of the channel before, and nothing stored is redone."""
    bucket = memory_bucket()
    w = AttemptWriter(bucket, job(), 1, TOKENS[1])
    w.begin(CUT, None)
    parts: list[Part] = []
    for i, (channel, local) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
        base = chunk(local)
        offset = channel * CHANNEL_STRIDE
        split = replace(
            base, index=i, first=base.first + offset, end=base.end + offset, channel=f"ch{channel}"
        )
        parts = w.add(split, segments(i))
    checkpoint = read_checkpoint(bucket, job(parts))
    assert checkpoint.chunks == 4
    assert checkpoint.resume.position == CHANNEL_STRIDE + 2 * 480_000
    # A gap within a channel, or a channel skipped, still ends what can be reused.
    assert follows_at(CHANNEL_STRIDE + 480_000, after=480_000) is False
    assert follows_at(2 * CHANNEL_STRIDE, after=480_000) is False
    assert follows_at(CHANNEL_STRIDE, after=480_000) is True


def follows_at(first: int, *, after: int) -> bool:
    record = Record(first=first, end=first + 480_000, tail="", segments=[])
    return follows(record, after, first=False)


def test_resume__reads_back_the_records_an_unbroken_attempt_holds() -> None:
    """Times to the microsecond are stored to the millisecond: the attempt keeps its records
    as stored, so a resume (and the speakers labelled over them) sees what it saw."""
    bucket = memory_bucket()
    w = AttemptWriter(bucket, job(), 1, TOKENS[1])
    w.begin(CUT, None)
    said = [Word(start=0.0123456, end=0.4987654, text=" hello", probability=0.912345)]
    parts = w.add(chunk(0), [Segment(start=0.0123456, end=0.5, text=" hello", words=said)])
    assert list(read_checkpoint(bucket, job(parts)).records) == w.records
    assert w.records[0].segments[0].start == 0.012


@pytest.mark.parametrize("what", ["no parts", "no cutting", "no chunk"])
def test_resume__unusable_checkpoints_say_why(what: str) -> None:
    bucket = memory_bucket()
    parts = write(bucket, 1, range(1))
    directory = f"scratch/ns/talk/u-1/a1-{TOKENS[1]}/"
    if what == "no cutting":
        bucket.delete([directory + "cutting.json"])
    if what == "no chunk":
        bucket.delete([chunk_key(directory, 0)])
    with pytest.raises(CheckpointUnusable):
        read_checkpoint(bucket, job([] if what == "no parts" else parts))


def test_a_write_whose_answer_was_lost_is_repeated_safely_and_other_bytes_are_refused() -> None:
    bucket = memory_bucket()
    w = AttemptWriter(bucket, job(), 1, TOKENS[1])
    w.begin(CUT, None)
    w.add(chunk(0), segments(0))
    again = AttemptWriter(bucket, job(), 1, TOKENS[1])
    again.begin(CUT, None)
    again.add(chunk(0), segments(0))  # the same bytes: a repeat, accepted
    other = AttemptWriter(bucket, job(), 1, TOKENS[1])
    other.begin(CUT, None)
    with pytest.raises(StoreConflict):
        other.add(chunk(0), segments(0, text="different"))


def test_finish__the_transcript_holds_every_segment_once_utf8_as_is_and_the_formats() -> None:
    bucket = memory_bucket()
    spec_job = job(output={"url": "s3://out/{key}", "formats": ["srt", "txt"]})
    w = AttemptWriter(bucket, spec_job, 1, TOKENS[1])
    w.begin(CUT, None)
    for i in range(3):
        w.add(chunk(i), segments(i, text="привет"))
    output = spec_job.spec.output
    assert isinstance(output, Output)
    summary = w.finish(90.0, "simulated", list(output.formats))
    assert (summary.chunks, summary.words, summary.segments) == (3, 6, 3)
    raw = bucket.get(w.transcript_key)
    assert raw is not None and "привет".encode() in raw
    found = load_transcript(bucket, w.transcript_key)
    assert isinstance(found, Transcript)
    assert (found.job, found.attempt, found.token) == ("talk", 1, TOKENS[1])
    assert found.text == "привет 0 привет 1 привет 2"
    srt = bucket.get(output_key(w.directory, "srt"))
    assert srt is not None and srt.startswith(b"1\n00:00:00,000 --> 00:00:02,000\n")
    assert bucket.get(output_key(w.directory, "json")) is None  # not asked for


def test_a_checkpoint_names_at_most_max_parts_then_an_attempt_copies_what_it_carries() -> None:
    bucket = memory_bucket()
    parts: list[Part] = []
    for attempt in range(1, MAX_PARTS + 2):
        parts = write(bucket, attempt, range(attempt - 1, attempt), parts=parts or None)
        assert len(parts) <= MAX_PARTS
    assert len(parts) == 1 and parts[0].attempt == MAX_PARTS + 1  # carried chunks copied over
    checkpoint = read_checkpoint(bucket, job(parts))
    assert checkpoint.chunks == MAX_PARTS + 1
