"""What the audio modules share: the sample rate, the cutting constants, the sample type and
the error a resume raises when a checkpoint does not fit its source."""

from __future__ import annotations

import threading

import numpy as np
import numpy.typing as npt

from recall.resources.errors import JobFailure

SAMPLE_RATE = 16_000
SNAP_SECONDS = 2.0  # how far back from a nominal cut to look for a pause
QUIET_SECONDS = 0.1  # a pause is the quietest stretch this long (a gap between words)...
STEP_SECONDS = 0.01  # ...looked for in steps of this
QUIETER = 0.5  # and used when below this share of the energy just before the nominal cut
TAIL_SECONDS = 0.25  # the samples before a cut that its signature covers
PREROLL_SECONDS = 5.0  # a resume seeks this far before the signed samples (decoders converge)
USER_AGENT = "recall-operator"

Samples = npt.NDArray[np.float32]


class ResumeInvalid(JobFailure):
    """The source ends before the resume position: the checkpoint does not fit it."""

    def __init__(self, message: str) -> None:
        super().__init__("ResumeInvalid", message, permanent=False)


class Either:
    """Set when either event is."""

    def __init__(self, *events: threading.Event | None) -> None:
        self.events = [e for e in events if e is not None]

    def is_set(self) -> bool:
        return any(e.is_set() for e in self.events)
