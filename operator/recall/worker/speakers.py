"""Speaker labels for a leased job's transcript, made once its last chunk is in
(`spec.transcript.speakers`; `recall.speakers`).

Contract of `label_records` (None when not asked):
- Labelled from the whole file once the last chunk is in: the media is decoded again from its
  start, one chunk at a time, and the words of every chunk record (this attempt's and a
  checkpoint's) are labelled together. Nothing rides in a checkpoint: the labels depend on the
  file's audio and words alone, so a resumed job gets the labels of an unbroken run, at the
  price of a second decode (measured in docs/transcripts.md).
- `poll` is called before each chunk (the lease is checked: a lost one stops it).
- Off when not asked, and with `channels: split` (each channel is its own speaker there).
- The model missing from the worker's installation is a retriable `JobFailure`
  (SpeakerModelMissing: another worker may have it). A media that yields no audio (the simulated
  engine's placeholder chunks) labels nothing and logs `speakers_skipped`.
- Fewer voices found than asked (`count`, or `min`) is not a failure: the words are labelled
  with the voices found and `Speakers.asked` says what was asked, for the job's condition.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

import numpy as np

from recall.base.clock import SYSTEM, Clock
from recall.media.types import Media
from recall.resources import TranscriptionJob
from recall.resources.errors import JobFailure
from recall.speakers import ModelMissing, VoiceEncoder, bounds_of, label_voices
from recall.transcripts import Record


@dataclass(frozen=True)
class Speakers:
    records: list[Record]  # the records with every word and segment labelled
    found: int  # voices found
    asked: int | None  # the count (or min) asked, when fewer voices were found


class _NoAudio(Exception):
    pass


def label_records(
    job: TranscriptionJob,
    media: Media,
    records: list[Record],
    poll: Callable[[], None],
    log: Any,
    clock: Clock = SYSTEM,
) -> Speakers | None:
    """The records labelled with speakers (the module contract); logged `seconds` by `clock`."""
    t = job.spec.transcript
    if t is None or t.speakers is None or t.split:
        return None
    try:
        encoder = VoiceEncoder.packaged()
    except ModelMissing as e:
        raise JobFailure("SpeakerModelMissing", str(e), permanent=False) from None
    segments = [s for r in records for s in r.segments]

    def blocks() -> Iterator[tuple[int, np.ndarray[Any, np.dtype[np.float32]]]]:
        for chunk in media.chunks(None):
            poll()
            if chunk.audio is None:
                raise _NoAudio()
            yield chunk.first, chunk.audio

    # CPU time has no read on the Clock: the labelling's own thread is measured by `time`.
    began, cpu = clock.monotonic(), time.thread_time()
    try:
        labelling = label_voices(encoder, segments, blocks(), bounds_of(t.speakers))
    except _NoAudio:
        log.warning("speakers_skipped", reason="the media has no audio to label")
        return None
    labelled = iter(labelling.segments)
    out = [
        dataclasses.replace(r, segments=list(islice(labelled, len(r.segments)))) for r in records
    ]
    wanted = t.speakers.count or t.speakers.min
    log.info(
        "speakers_labelled",
        speakers=labelling.found.count,
        asked=wanted,
        windows=labelling.windows,
        seconds=round(clock.monotonic() - began, 3),
        cpu_seconds=round(time.thread_time() - cpu, 3),
    )
    short = labelling.found.short and wanted is not None and labelling.found.count < wanted
    return Speakers(out, labelling.found.count, wanted if short else None)
