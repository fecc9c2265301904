"""Media for the engines: fetch a source, decode and cut it lazily into chunks.

- `types`: the chunk, the cutting, the resume point and the `Media` interface that engines and
  the transcript store share;
- `fetch`, `container`, `decode`, `cut`, `media`: download or open a source, decode it with
  PyAV a chunk at a time, cut at quiet points (see `media` for the contract).

May import `recall.resources` and `recall.base`; never an engine or a component.
"""

from recall.media.common import SAMPLE_RATE, ResumeInvalid
from recall.media.cut import encode_wav
from recall.media.media import AudioMedia, MediaOptions, load_job_media, load_media

__all__ = [
    "SAMPLE_RATE",
    "AudioMedia",
    "MediaOptions",
    "ResumeInvalid",
    "encode_wav",
    "load_job_media",
    "load_media",
]
