"""Transcripts and checkpoints of any length, in ConfigMaps owned by the job.

One attempt writes one manifest (`<job>-a<attempt>`) and shards (`<job>-a<attempt>-<n>`, each
well under the 1 MiB a ConfigMap holds). The chunks' segments are written once, into shards,
as the work goes; the manifest is the checkpoint while the attempt works
(`status.progress.checkpoint`) and becomes the transcript when it is complete
(`status.result.configMap`): nothing is copied at the end, and nothing is stored twice.
A resumed attempt references the shards of the checkpoint it resumed from.

- `layout`: names, labels and encodings (pure).
- `store`: `TranscriptStore` (read a transcript or a checkpoint) and `TranscriptWriter`.
- `cleanup`: `unreferenced(job, config_maps)`, the ConfigMaps nothing accepted references
  (pure; the operator and a worker whose complete was refused delete them).

Why ConfigMaps: no extra dependency or service to run, the RBAC the worker already has, and
owner references make the garbage collector delete them with the job. An object store could
be offered by the chart later behind the same reader and writer.
"""

from recall.transcripts.cleanup import references, unreferenced
from recall.transcripts.layout import (
    LABEL_ATTEMPT,
    LABEL_JOB_UID,
    LABEL_KIND,
    MANIFEST,
    SHARD,
    SHARD_BYTES,
    Manifest,
    Record,
    ShardRef,
    Summary,
    Transcript,
    manifest_name,
    shard_name,
)
from recall.transcripts.store import (
    Checkpoint,
    CheckpointUnusable,
    TranscriptStore,
    TranscriptWriter,
    job_selector,
)

__all__ = [
    "LABEL_ATTEMPT",
    "LABEL_JOB_UID",
    "LABEL_KIND",
    "MANIFEST",
    "SHARD",
    "SHARD_BYTES",
    "Checkpoint",
    "CheckpointUnusable",
    "Manifest",
    "Record",
    "ShardRef",
    "Summary",
    "Transcript",
    "TranscriptStore",
    "TranscriptWriter",
    "job_selector",
    "manifest_name",
    "references",
    "shard_name",
    "unreferenced",
]
