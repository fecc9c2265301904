"""Audio for the real engines: fetch a source, decode and cut it lazily (see `media` for the
contract)."""

from recall.audio.common import (
    PREROLL_SECONDS,
    QUIET_SECONDS,
    QUIETER,
    SAMPLE_RATE,
    SNAP_SECONDS,
    STEP_SECONDS,
    ResumeInvalid,
    Samples,
)
from recall.audio.cut import Cutter, encode_wav, split
from recall.audio.decode import Decoder, probe, tail_signature
from recall.audio.fetch import classify_http_status, display_url, download, fetch, local_path
from recall.audio.media import AudioMedia, MediaOptions, load_job_media, load_media

__all__ = [
    "PREROLL_SECONDS",
    "QUIETER",
    "QUIET_SECONDS",
    "SAMPLE_RATE",
    "SNAP_SECONDS",
    "STEP_SECONDS",
    "AudioMedia",
    "Cutter",
    "Decoder",
    "MediaOptions",
    "ResumeInvalid",
    "Samples",
    "classify_http_status",
    "display_url",
    "download",
    "encode_wav",
    "fetch",
    "load_job_media",
    "load_media",
    "local_path",
    "probe",
    "split",
    "tail_signature",
]
