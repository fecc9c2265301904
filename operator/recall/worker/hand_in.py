"""The end of an attempt: the transcript written, then handed in by the fenced `complete`.

`hand_in`, once every chunk is durable: the speakers labelled from the whole file
(`recall.worker.speakers`), the transcript and the job's output formats written to the results
store (`recall.worker.storing`), then `complete` with a result that names them. Only the fenced
complete makes the transcript the result: a complete refused (`LeaseLost`, raised) leaves it
for the operator to collect. Returns the outcome, "succeeded".
"""

from __future__ import annotations

from collections.abc import Callable

from recall.base import faults
from recall.engines.base import Engine
from recall.media.types import Media
from recall.resources import Result
from recall.transcripts import AttemptWriter, Summary, output_formats
from recall.worker.deadline import LeaseLost
from recall.worker.holder import LeaseHolder
from recall.worker.pipeline import Stopwatch
from recall.worker.speakers import Speakers, label_records
from recall.worker.storing import store_call


def hand_in(
    h: LeaseHolder,
    watch: Stopwatch,
    engine: Engine,
    media: Media,
    writer: AttemptWriter,
    chunks: int,
    check_stop: Callable[[LeaseHolder], None],
    progress: Callable[[], None] = lambda: None,
) -> str:
    """Write the transcript (and the output formats), then complete with it (fenced);
    `progress()` at each chunk the speakers are labelled on (the worker's liveness)."""
    h.check()
    formats = output_formats(h.known)
    model, digest = engine.model_of(h.known) or (None, None)
    device, compute_type = engine.device_of(h.known) or (None, None)

    def poll() -> None:  # before each chunk labelled: the labelling moves on
        check_stop(h)
        progress()

    speakers = label_records(h.known, media, writer.records, poll, h.log, h.clock)
    if speakers is not None:
        writer.records = speakers.records
    summary = store_call(
        h,
        watch,
        "to store the transcript",
        lambda: writer.finish(
            media.duration,
            engine.label(),
            formats,
            model=model,
            model_digest=digest or None,
            media=media,
        ),
        check_stop,
    )
    result_ref = _result(h, writer, summary, speakers, device, compute_type)
    faults.hit("worker-before-complete")
    try:
        watch.timed("lease", lambda: h.complete(result_ref, chunks=chunks))
    except LeaseLost:
        h.log.warning("complete_refused_transcript_left", transcript=writer.transcript_key)
        raise
    h.log.info(
        "completed",
        transcript=writer.transcript_key,
        words=summary.words,
        chunks=summary.chunks,
        audio_seconds=round(summary.duration, 2),
        lease_writes=h.writes,
        **watch.fields(),
    )
    return "succeeded"


def _result(
    h: LeaseHolder,
    writer: AttemptWriter,
    summary: Summary,
    speakers: Speakers | None,
    device: str | None,
    compute_type: str | None,
) -> Result:
    """The result `complete` records: where the transcript is, and what made it."""
    split = bool(h.known.spec.transcript and h.known.spec.transcript.split)
    return Result(
        transcript=writer.transcript_key,
        worker=h.worker,
        engine=summary.engine,
        words=summary.words,
        duration_seconds=summary.duration,
        model=summary.model,
        model_digest=summary.model_digest,
        language=summary.language,
        language_probability=summary.language_probability,
        device=device,
        compute_type=compute_type,
        channels=summary.channels if split else None,
        speakers=speakers.found if speakers else None,
        speakers_asked=speakers.asked if speakers else None,
    )
