"""An unexpected error of a job that redacts: its message can carry the transcript (a pydantic
`ValidationError` shows the value it refused), so the job's `lastError` and the worker's log
say only the error's type; a job that does not redact keeps the whole message. The real worker
loop on the memory store."""

from __future__ import annotations

from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from recall.engines.simulated import SimulatedEngine
from recall.media.types import Chunk, Segment
from recall.resources import TranscriptionJob
from recall_dev.twin.api import MemoryApi
from tests.unit.fakes import NS, job_manifest, memory_bucket, run_one_job

SECRET = " call me on five five five, one two three four"  # pydantic shows its ends


class Refusing(SimulatedEngine):
    """Gives the worker a segment it refuses, as a bug in an engine might."""

    def _segments(self, job: TranscriptionJob, chunk: Chunk) -> list[Segment]:
        return [Segment.model_validate({"text": SECRET})]  # no start, no end


def fail_once(tmp_path: Path, **spec: Any) -> tuple[str, list[MutableMapping[str, Any]]]:
    """The job's lastError message and the worker's log after its first attempt."""
    store, results = MemoryApi(watch_seconds=1.0), memory_bucket()
    store.create_job(NS, job_manifest("talk", maxAttempts=1, **spec))
    try:
        with capture_logs() as logs:
            run_one_job(store, Refusing(chunks=2, chunk_delay_seconds=0), results)
        job = store.get_job(NS, "talk")
        assert job is not None and job.status.last_error is not None, store.dump()
        return job.status.last_error.message or "", logs
    finally:
        store.close()


def test_work_error__a_redacting_job_keeps_only_the_error_s_type(tmp_path: Path) -> None:
    message, logs = fail_once(tmp_path, transcript={"redact": {"types": ["phone"]}})
    assert message.startswith("ValidationError") and "three four" not in message
    assert all("three four" not in repr(entry) for entry in logs)
    (error,) = [e for e in logs if e["event"] == "work_error"]
    assert error["error"] == "ValidationError" and "exc_info" not in error


def test_work_error__a_job_that_does_not_redact_keeps_the_message(tmp_path: Path) -> None:
    message, _ = fail_once(tmp_path)
    assert message.startswith("ValidationError: ") and "one two three four" in message
