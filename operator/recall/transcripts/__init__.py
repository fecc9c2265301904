"""The work's bytes in the results store: chunks, checkpoints, transcripts, outputs, the index.

- `layout`: keys and encodings (pure): each attempt writes once under its own directory;
- `store`: the worker's writes (`AttemptWriter`) and `load_transcript`; `checkpoint`: reading back;
- `redact` (with `entities`) and `holding`: what must not be kept, never written (pure);
- `garbage`: which of a job's objects nothing accepted references (pure; the operator deletes);
- `outputs`: where an accepted result is published (pure);
- `formats`: txt, srt, vtt and json renderings (pure).

Why an object store (DESIGN §4b): the API server keeps the ledger only, so etcd does not grow
with hours of audio; a job's status names where its chunks (`progress.parts`) and transcript
(`result.transcript`) are, and a renewal per chunk is the only API write. May import
`recall.bucket`, `recall.media`, `recall.engines.languages`, `recall.resources`, `recall.base`.
"""

from recall.transcripts.checkpoint import (
    Checkpoint,
    CheckpointUnusable,
    directory_of,
    read_checkpoint,
)
from recall.transcripts.formats import output_formats, render
from recall.transcripts.garbage import JobView, garbage
from recall.transcripts.holding import Prompt
from recall.transcripts.layout import (
    MAX_PARTS,
    attempt_dir,
    chunk_key,
    index_key,
    job_prefix,
    namespace_prefix,
    output_key,
    parse_scratch,
    transcript_key,
)
from recall.transcripts.outputs import OutputInvalid, output_url
from recall.transcripts.records import Record, Summary, Transcript
from recall.transcripts.store import AttemptWriter, load_transcript

__all__ = [
    "MAX_PARTS",
    "AttemptWriter",
    "Checkpoint",
    "CheckpointUnusable",
    "JobView",
    "OutputInvalid",
    "Prompt",
    "Record",
    "Summary",
    "Transcript",
    "attempt_dir",
    "chunk_key",
    "directory_of",
    "garbage",
    "index_key",
    "job_prefix",
    "load_transcript",
    "namespace_prefix",
    "output_formats",
    "output_key",
    "output_url",
    "parse_scratch",
    "read_checkpoint",
    "render",
    "transcript_key",
]
