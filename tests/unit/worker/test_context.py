"""The context (the text before a chunk) across a resume: the engine is given, for the first
chunk after a resume, what an uninterrupted attempt gives it. The real worker loop on the
memory store, with an engine double that records every `context`; with redaction on, the
context is what the chunk records store (redacted, without the words held back), in an unbroken
run and after a resume alike."""

from __future__ import annotations

from pathlib import Path

from recall.engines.simulated import SimulatedEngine
from recall.fencing import fenced_write
from recall.media.types import Chunk, Segment
from recall.protocol import lease
from recall.resources import Phase, TranscriptionJob
from recall_dev.twin.api import MemoryApi
from tests.unit.fakes import NS, engine_calls, job_manifest, memory_bucket, run_one_job

CHUNKS = 6
SILENT = {1, 2, 4}  # chunks without speech: no segment


class Recording(SimulatedEngine):
    """Text for chunks 0 and 3 and 5 (the same whatever the job), none for the silent ones;
    records every call in `record`."""

    def __init__(self, record: Path) -> None:
        super().__init__(chunks=CHUNKS, chunk_delay_seconds=0, record_path=record)

    def _segments(self, job: TranscriptionJob, chunk: Chunk) -> list[Segment]:
        if chunk.index in SILENT:
            return []
        return [
            Segment(start=0.0, end=1.0, text=f" Chunk {chunk.index} speaks."),
            Segment(start=1.0, end=2.0, text=" "),
            Segment(start=2.0, end=3.0, text=f"It ends {chunk.index}. "),
        ]


CALL = [
    " Hello and welcome. My number is five five five,",
    " one two three four. Call me any time you like.",
    " We talked about the weather and the trains today.",
    " That was all for now.",
    "",
    " Bye.",
]


class Calling(Recording):
    """A call whose phone number is said across the seam of chunks 0 and 1."""

    def _segments(self, job: TranscriptionJob, chunk: Chunk) -> list[Segment]:
        text = CALL[chunk.index]
        return [Segment(start=0.0, end=10.0, text=text)] if text else []


def transcribe(
    simulate: dict[str, object],
    attempts: int,
    record: Path,
    engine_type: type[Recording] = Recording,
    **spec: object,
) -> list[tuple[int, int, str]]:
    """The contexts the engine was given for one job run `attempts` times."""
    store, results, engine = MemoryApi(watch_seconds=1.0), memory_bucket(), engine_type(record)
    store.create_job(
        NS,
        job_manifest(
            "talk",
            engine={"name": "simulated", "simulate": {"chunks": CHUNKS, **simulate}},
            **spec,
        ),
    )
    try:
        for k in range(attempts):
            if k:
                fenced_write(
                    store, NS, "talk", lambda j: lease.end_backoff(j.status), action="end_backoff"
                )
            run_one_job(store, engine, results)
        job = store.get_job(NS, "talk")
        assert job is not None and job.status.phase == Phase.SUCCEEDED, store.dump()
        assert job.status.result is not None and job.status.result.attempt == attempts
    finally:
        store.close()
    return [(c.attempt, c.chunk, c.context) for c in engine_calls(record)]


def test_context__the_first_chunk_after_a_resume_gets_what_an_uninterrupted_attempt_gives(
    tmp_path: Path,
) -> None:
    """Chunks 0 and 3 speak, 1, 2 and 4 are silent; attempt 1 fails at chunk 3 after storing
    chunks 0-2. Resumed at chunk 3, the engine gets chunk 0's text (the last chunk with text),
    as the uninterrupted attempt gave it, not the silent chunk 2's nothing."""
    whole = transcribe({}, attempts=1, record=tmp_path / "whole.jsonl")
    assert [(c, context) for _, c, context in whole] == [
        (0, ""),
        (1, "Chunk 0 speaks. It ends 0."),
        (2, "Chunk 0 speaks. It ends 0."),  # silence passes the text before on
        (3, "Chunk 0 speaks. It ends 0."),
        (4, "Chunk 3 speaks. It ends 3."),
        (5, "Chunk 3 speaks. It ends 3."),
    ]
    failing = {"failure": "retriable", "failAtChunk": 3, "failAttempts": 1}
    resumed = transcribe(failing, attempts=2, record=tmp_path / "resumed.jsonl")
    second = [(c, context) for a, c, context in resumed if a == 2]
    assert [c for c, _ in second] == [3, 4, 5]  # resumed at chunk 3, chunks 0-2 not redone
    assert second == [(c, context) for _, c, context in whole if c >= 3]


def test_context__with_redaction_a_resume_prompts_as_an_unbroken_run_and_nothing_unredacted(
    tmp_path: Path,
) -> None:
    """The phone number is said across chunks 0 and 1 and held back to chunk 2's record;
    attempt 1 fails at chunk 3, and chunk 2, whose record held words back, is transcribed
    again. Every context is a stored record's text: redacted, the held words not in it."""
    redact = {"transcript": {"redact": {"types": ["phone"]}}}
    whole = transcribe({}, 1, tmp_path / "whole.jsonl", Calling, **redact)
    contexts = dict((c, context) for _, c, context in whole)
    assert contexts[1] == "Hello"  # the rest of chunk 0 is held back into chunk 1's record
    assert contexts[2] == "and welcome. My number is"  # the number is held on to chunk 2
    assert contexts[3] == "[PHONE]. Call me any time you like. We"
    for _, _, context in whole:
        assert "five" not in context and "four" not in context, context
    failing = {"failure": "retriable", "failAtChunk": 3, "failAttempts": 1}
    resumed = transcribe(failing, 2, tmp_path / "resumed.jsonl", Calling, **redact)
    second = [(c, context) for a, c, context in resumed if a == 2]
    assert [c for c, _ in second] == [2, 3, 4, 5]  # chunk 2 again, for the words it held
    assert second == [(c, context) for _, c, context in whole if c >= 2]
