"""The context (the text before a chunk) across a resume: the engine is given, for the first
chunk after a resume, what an uninterrupted attempt gives it. The real worker loop on the
memory store, with an engine double that records every `context`."""

from __future__ import annotations

from pathlib import Path

from recall.engines.simulated import SimulatedEngine
from recall.fencing import fenced_write
from recall.kube.memory import MemoryApi
from recall.media.types import Chunk, Segment
from recall.protocol import lease
from recall.resources import Phase, TranscriptionJob
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


def transcribe(
    simulate: dict[str, object], attempts: int, record: Path
) -> list[tuple[int, int, str]]:
    """The contexts the engine was given for one job run `attempts` times."""
    store, results, engine = MemoryApi(watch_seconds=1.0), memory_bucket(), Recording(record)
    store.create_job(
        NS,
        job_manifest(
            "talk", engine={"name": "simulated", "simulate": {"chunks": CHUNKS, **simulate}}
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
