"""Media for the engines: fetch a source, decode and cut it lazily into chunks.

- `types`: the chunk, the cutting, the resume point and the `Media` interface that engines and
  the transcript store share;
- `fetch`, `container`, `decode`, `cut`, `media`: download or open a source, decode it with
  PyAV a chunk at a time, cut at quiet points (see `media` for the contract).

May import `recall.resources` and `recall.base`; never an engine or a component.
"""

from recall.media.common import (
    PREROLL_SECONDS,
    QUIET_SECONDS,
    QUIETER,
    SAMPLE_RATE,
    STEP_SECONDS,
    ResumeInvalid,
)
from recall.media.cut import Cutter, encode_wav, split
from recall.media.decode import Decoder
from recall.media.fetch import classify_http_status, display_url
from recall.media.media import AudioMedia, MediaOptions, load_job_media, load_media

__all__ = [
    "PREROLL_SECONDS",
    "QUIETER",
    "QUIET_SECONDS",
    "SAMPLE_RATE",
    "STEP_SECONDS",
    "AudioMedia",
    "Cutter",
    "Decoder",
    "MediaOptions",
    "ResumeInvalid",
    "classify_http_status",
    "display_url",
    "encode_wav",
    "load_job_media",
    "load_media",
    "split",
]
