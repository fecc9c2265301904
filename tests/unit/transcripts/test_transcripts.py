"""Transcripts and checkpoints in sharded ConfigMaps, on the memory store (which enforces the
1 MiB ConfigMap limit): round trips of any size and script, checkpoints that resume exactly,
writes that may be repeated."""

from __future__ import annotations

import json

import pytest

from recall.kube import Unavailable
from recall.kube.memory import CONFIG_MAP_LIMIT, Fault, MemoryStore
from recall.media.types import Chunk, Cutting, Resume, Segment
from recall.resources import TranscriptionJob
from recall.resources.errors import JobFailure
from recall.transcripts import (
    LABEL_ATTEMPT,
    LABEL_JOB_UID,
    LABEL_KIND,
    SHARD_BYTES,
    CheckpointUnusable,
    Manifest,
    ShardRef,
    TranscriptStore,
    job_selector,
    manifest_name,
    shard_name,
)
from recall.transcripts.layout import MANIFEST_KEY, record_key
from tests.unit.fakes import NS, job_manifest

CUTTING = Cutting(chunk_seconds=30.0, snap_seconds=2.0, rate=16_000, source="file:size=1;mtime=2")
SIZE = 30 * 16_000
CYRILLIC = "Съешь же ещё этих мягких французских булок, да выпей чаю"


def make_job(store: MemoryStore, name: str = "talk") -> TranscriptionJob:
    return store.create_job(NS, job_manifest(name))


def chunk(i: int) -> Chunk:
    return Chunk(
        index=i,
        start=i * 30.0,
        duration=30.0,
        first=i * SIZE,
        end=(i + 1) * SIZE,
        tail=f"{i:08x}",
    )


def segments(i: int, text: str = "hello world") -> list[Segment]:
    return [
        Segment(start=i * 30.0, end=i * 30.0 + 14.5, text=f"{text} {i}a"),
        Segment(start=i * 30.0 + 15.0, end=i * 30.0 + 29.9, text=f"{text} {i}b"),
    ]


def data_size(data: dict[str, str]) -> int:
    return sum(len(k.encode()) + len(v.encode()) for k, v in data.items())


def written(store: MemoryStore, job: str) -> dict[str, dict[str, str]]:
    return {cm.name: cm.data for cm in store.list_config_maps(NS, job_selector(job))}


# --- round trips ----------------------------------------------------------------------------


def test_round_trip__utf8_stored_once_and_as_is() -> None:
    store = MemoryStore()
    job = make_job(store)
    writer = TranscriptStore(store).writer(job, 1)
    name = writer.begin(CUTTING, None)
    for i in range(3):
        writer.add(chunk(i), segments(i, CYRILLIC))
    summary = writer.finish(90.0, "whisper/tiny")

    assert name == manifest_name("talk", 1) == "talk-a1"
    data = written(store, "talk")
    assert set(data) == {"talk-a1", "talk-a1-0"}
    shard = data["talk-a1-0"]
    assert set(shard) == {record_key(i) for i in range(3)}
    raw = "".join(shard.values())
    assert CYRILLIC in raw and "\\u" not in raw  # UTF-8 as is, not escaped
    assert raw.count(CYRILLIC) == 6  # each segment's text once; no separate plain text
    assert "transcript.txt" not in data["talk-a1"]

    transcript = TranscriptStore(store).load_transcript(NS, name)
    assert transcript is not None
    assert transcript.segments == [s for i in range(3) for s in segments(i, CYRILLIC)]
    assert transcript.text.startswith(f"{CYRILLIC} 0a {CYRILLIC} 0b")
    assert (transcript.duration, transcript.engine) == (90.0, "whisper/tiny")
    assert transcript.words == summary.words == 6 * (len(CYRILLIC.split()) + 1)
    assert (summary.chunks, summary.segments) == (3, 6)


def test_round_trip__a_transcript_over_3_mib_is_sharded_under_the_limit() -> None:
    store = MemoryStore()
    job = make_job(store, "ten-hours")
    writer = TranscriptStore(store).writer(job, 1)
    name = writer.begin(CUTTING, None)
    line = "и " * 400 + "the end"  # ~1.2 KB of mixed UTF-8 per segment
    n = 1300
    for i in range(n):
        writer.add(chunk(i), segments(i, line))
    writer.finish(n * 30.0, "simulated")

    data = written(store, "ten-hours")
    shards = {k: v for k, v in data.items() if k != name}
    total = sum(data_size(v) for v in shards.values())
    assert total > 3 * 1024**2
    assert all(data_size(v) <= SHARD_BYTES < CONFIG_MAP_LIMIT for v in shards.values())
    assert len(shards) == -(-total // SHARD_BYTES) or len(shards) == -(-total // SHARD_BYTES) + 1
    assert data_size(data[name]) < 4096  # the manifest stays small
    manifest = Manifest.from_data(data[name])
    assert [s.name for s in manifest.shards] == [
        shard_name("ten-hours", 1, k) for k in range(len(shards))
    ]
    assert all(s.end is not None for s in manifest.shards)

    transcript = TranscriptStore(store).load_transcript(NS, name)
    assert transcript is not None and len(transcript.segments) == 2 * n
    assert transcript.segments[-1] == segments(n - 1, line)[-1]


def test_round_trip__labels_name_the_job_the_attempt_and_the_kind() -> None:
    store = MemoryStore()
    job = make_job(store)
    writer = TranscriptStore(store).writer(job, 3)
    writer.begin(CUTTING, None)
    writer.add(chunk(0), segments(0))
    labels = {cm.name: cm.labels for cm in store.list_config_maps(NS, job_selector("talk"))}
    assert labels["talk-a3"][LABEL_KIND] == "manifest"
    assert labels["talk-a3-0"][LABEL_KIND] == "shard"
    for value in labels.values():
        assert value[LABEL_ATTEMPT] == "3"
        assert value[LABEL_JOB_UID] == job.metadata.uid
        assert value["recall.dev/job"] == "talk"


def test_load_transcript__reads_the_earlier_single_config_map_layout() -> None:
    store = MemoryStore()
    store.create_config_map(
        NS,
        "old-transcript-1",
        {
            "transcript.txt": "hello there",
            "segments.json": json.dumps([{"start": 0.0, "end": 1.0, "text": "hello there"}]),
            "meta.json": json.dumps({"duration": 1.0, "engine": "whisper/tiny.en", "words": 2}),
        },
        labels={},
    )
    transcript = TranscriptStore(store).load_transcript(NS, "old-transcript-1")
    assert transcript is not None
    assert (transcript.text, transcript.duration, transcript.engine) == (
        "hello there",
        1.0,
        "whisper/tiny.en",
    )


def test_load_transcript__a_missing_shard_is_an_error_not_a_shorter_text() -> None:
    store = MemoryStore()
    job = make_job(store)
    writer = TranscriptStore(store).writer(job, 1)
    name = writer.begin(CUTTING, None)
    writer.add(chunk(0), segments(0))
    writer.finish(30.0, "simulated")
    store.delete_config_map(NS, "talk-a1-0")
    with pytest.raises(LookupError, match="talk-a1-0 is missing"):
        TranscriptStore(store).load_transcript(NS, name)
    assert TranscriptStore(store).load_transcript(NS, "nothing") is None


# --- writes that may be repeated ------------------------------------------------------------


def test_writer__a_write_whose_answer_was_lost_is_repeated_safely() -> None:
    store = MemoryStore()
    job = make_job(store)
    writer = TranscriptStore(store, shard_bytes=200).writer(job, 1)
    writer.begin(CUTTING, None)
    writer.add(chunk(0), segments(0))
    # The next chunk opens a shard; its create is applied but the answer is lost.
    store.inject(Fault("create_config_map", Unavailable("reset", maybe_applied=True), applied=True))
    with pytest.raises(Unavailable):
        writer.add(chunk(1), segments(1))
    writer.add(chunk(1), segments(1))  # the caller repeats it
    writer.add(chunk(2), segments(2))
    writer.finish(90.0, "simulated")
    transcript = TranscriptStore(store).load_transcript(NS, "talk-a1")
    assert transcript is not None
    assert transcript.segments == [s for i in range(3) for s in segments(i)]


def test_writer__a_namesakes_leftover_is_replaced_not_merged() -> None:
    store = MemoryStore()
    store.create_config_map(
        NS,
        "talk-a1-0",
        {record_key(i): "stale" for i in range(5)},
        labels={LABEL_JOB_UID: "a-deleted-job"},
    )
    job = make_job(store)
    writer = TranscriptStore(store).writer(job, 1)
    writer.begin(CUTTING, None)
    writer.add(chunk(0), segments(0))
    cm = store.get_config_map(NS, "talk-a1-0")
    assert cm is not None and set(cm.data) == {record_key(0)}
    assert cm.labels[LABEL_JOB_UID] == job.metadata.uid


def test_writer__a_chunk_larger_than_a_shard_is_refused_for_good() -> None:
    store = MemoryStore()
    writer = TranscriptStore(store, shard_bytes=1000).writer(make_job(store), 1)
    writer.begin(CUTTING, None)
    with pytest.raises(JobFailure) as info:
        writer.add(chunk(0), segments(0, "x" * 2000))
    assert (info.value.reason, info.value.permanent) == ("TranscriptRefused", True)
    assert "chunk 0" in info.value.message


# --- checkpoints ----------------------------------------------------------------------------


def write_attempt(store: MemoryStore, job: TranscriptionJob, chunks: int, shard_bytes: int) -> str:
    writer = TranscriptStore(store, shard_bytes=shard_bytes).writer(job, 1)
    name = writer.begin(CUTTING, None)
    for i in range(chunks):
        writer.add(chunk(i), segments(i))
    return name


def test_checkpoint__resumes_after_the_last_stored_chunk() -> None:
    store = MemoryStore()
    job = make_job(store)
    name = write_attempt(store, job, 7, shard_bytes=300)
    checkpoint = TranscriptStore(store).read_checkpoint(NS, name)
    assert checkpoint.cutting == CUTTING
    assert checkpoint.chunks == 7
    assert checkpoint.resume == Resume(chunks=7, position=7 * SIZE, tail=f"{6:08x}")
    assert checkpoint.words == 7 * 2 * 3
    assert len(checkpoint.shards) > 2
    assert [(s.first, s.end) for s in checkpoint.shards][-1][1] == 7
    assert all(s.end is not None for s in checkpoint.shards)  # pinned


def test_checkpoint__a_resumed_attempt_references_the_shards_and_adds_its_own() -> None:
    store = MemoryStore()
    job = make_job(store)
    ts = TranscriptStore(store, shard_bytes=300)
    first = write_attempt(store, job, 5, shard_bytes=300)
    checkpoint = ts.read_checkpoint(NS, first)
    # The first attempt, now a zombie, writes one more chunk into its open shard.
    open_shard = checkpoint.shards[-1].name
    store.patch_config_map(NS, open_shard, {record_key(5): '{"cut":[0,1],"tail":"","segments":[]}'})

    writer = ts.writer(job, 2)
    second = writer.begin(CUTTING, checkpoint)
    for i in range(5, 9):
        writer.add(chunk(i), segments(i))
    writer.finish(9 * 30.0, "simulated")

    manifest = Manifest.from_data(written(store, "talk")[second])
    assert manifest.shards[: len(checkpoint.shards)] == checkpoint.shards
    assert all(s.name.startswith("talk-a2-") for s in manifest.shards[len(checkpoint.shards) :])
    transcript = ts.load_transcript(NS, second)
    assert transcript is not None
    assert transcript.segments == [s for i in range(9) for s in segments(i)]  # not the zombie's


def test_checkpoint__stops_at_a_gap_or_overlap_in_the_cuts() -> None:
    store = MemoryStore()
    job = make_job(store)
    name = write_attempt(store, job, 4, shard_bytes=SHARD_BYTES)
    bad = json.dumps({"cut": [3 * SIZE + 5, 4 * SIZE], "tail": "", "segments": []})
    store.patch_config_map(NS, "talk-a1-0", {record_key(3): bad})
    checkpoint = TranscriptStore(store).read_checkpoint(NS, name)
    assert checkpoint.chunks == 3
    assert checkpoint.resume.position == 3 * SIZE
    assert checkpoint.shards == (ShardRef("talk-a1-0", 0, 3),)


def test_checkpoint__a_missing_shard_ends_what_can_be_reused() -> None:
    store = MemoryStore()
    job = make_job(store)
    name = write_attempt(store, job, 6, shard_bytes=300)
    manifest = Manifest.from_data(written(store, "talk")[name])
    store.delete_config_map(NS, manifest.shards[1].name)
    checkpoint = TranscriptStore(store).read_checkpoint(NS, name)
    assert checkpoint.shards == (manifest.shards[0],)
    assert checkpoint.chunks == manifest.shards[0].end


@pytest.mark.parametrize(
    ("data", "phrase"),
    [
        (None, "is missing"),
        ({"chunk-00000.json": "[]"}, "no cut positions"),
        ({MANIFEST_KEY: '{"format": 99}'}, "unknown manifest format"),
        ({MANIFEST_KEY: "not json"}, ""),
    ],
)
def test_checkpoint__unusable_ones_say_why(data: dict[str, str] | None, phrase: str) -> None:
    store = MemoryStore()
    if data is not None:
        store.create_config_map(NS, "cp", data, labels={})
    with pytest.raises(CheckpointUnusable) as info:
        TranscriptStore(store).read_checkpoint(NS, "cp")
    assert phrase in str(info.value)
