"""The work's bytes in the results store: chunks, checkpoints, transcripts, outputs, the index.

- `layout`: keys and encodings (pure): each attempt writes once under its own directory,
  keyed by the job's UID, the attempt and the lease token;
- `store`: `AttemptWriter` (the worker's writes: cutting, one record per chunk, the
  transcript and its rendered formats) and `load_transcript`; `checkpoint`: `read_checkpoint`;
- `redact` (with `entities`, what it finds) and `holding` (the hold rule from record to
  record, and the engine's `Prompt`): what must not be kept, never written (pure);
- `garbage`: which of a job's objects nothing accepted references (pure; the operator
  deletes them);
- `outputs`: where an accepted result is published (`spec.output`, pure);
- `formats`: txt, srt, vtt and json renderings (pure).

Why an object store (DESIGN §4b): the API server keeps the ledger only, so etcd does not grow
with hours of audio; a job's status names where its chunks are (`progress.parts`) and where its
transcript is (`result.transcript`), and a renewal per chunk is the only API write. May import
`recall.bucket`, `recall.media` (the chunk types), `recall.engines.languages` (a file's
language), `recall.resources` and `recall.base`.
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
