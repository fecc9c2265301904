"""Where the work's bytes live in the results store: the keys (encodings: `records`). Pure.

    scratch/<ns>/<job>/<uid>/a<attempt>-<token>/cutting.json      how the media was cut
    scratch/<ns>/<job>/<uid>/a<attempt>-<token>/c000042.json      chunk 42's segments
    scratch/<ns>/<job>/<uid>/a<attempt>-<token>/transcript.json   the whole transcript
    scratch/<ns>/<job>/<uid>/a<attempt>-<token>/out.srt           a rendered output format
    index/<ns>/<batch>/<batch-uid>/<item>.json                    a Batch's results index

- An attempt writes each object once, under its own directory. It is scratch until the fenced
  `complete` names the directory's `transcript.json` (`status.result.transcript`); the API
  server refuses a result whose key does not carry the completing lease's token.
- A Batch item's index entry is a copy of its accepted transcript, written by the operator when
  it publishes: it outlives the job (`ttlSecondsAfterFinished`) and goes with the Batch.
- Keys never start with '/'; they are relative to the store URL (`RECALL_STORE_URL`).
"""

from __future__ import annotations

from dataclasses import dataclass

SCRATCH = "scratch"
INDEX = "index"
CUTTING = "cutting.json"
TRANSCRIPT = "transcript.json"
OUTPUT = "out"
REDACTED_AUDIO = "redacted.wav"  # out.redacted.wav: the audio with the redacted spans silenced
ORIGINAL = "original.json"  # the unredacted transcript (`redact.keepOriginal`)
MAX_PARTS = 8  # parts a checkpoint names at most: a job's status stays a few kilobytes


# --- keys -----------------------------------------------------------------------------------


def job_prefix(namespace: str, job: str, uid: str) -> str:
    return f"{SCRATCH}/{namespace}/{job}/{uid}/"


def namespace_prefix(namespace: str) -> str:
    return f"{SCRATCH}/{namespace}/"


def attempt_dir(namespace: str, job: str, uid: str, attempt: int, token: str) -> str:
    return f"{job_prefix(namespace, job, uid)}a{attempt}-{token}/"


def chunk_key(directory: str, index: int) -> str:
    return f"{directory}c{index:06d}.json"


def transcript_key(directory: str) -> str:
    return directory + TRANSCRIPT


def original_key(directory: str) -> str:
    """The unredacted transcript's key (`redact.keepOriginal`), beside the transcript."""
    return directory + ORIGINAL


def original_chunk_key(directory: str, index: int) -> str:
    """Chunk `index`'s unredacted record (`redact.keepOriginal`), beside the redacted one."""
    return f"{directory}c{index:06d}.original.json"


def output_key(directory: str, fmt: str) -> str:
    return f"{directory}{OUTPUT}.{fmt}"


def index_key(namespace: str, batch: str, batch_uid: str, item: str) -> str:
    return f"{INDEX}/{namespace}/{batch}/{batch_uid}/{item}.json"


@dataclass(frozen=True, slots=True)
class ScratchKey:
    """A parsed scratch key: whose object it is, and its name in the attempt's directory."""

    namespace: str
    job: str
    uid: str
    attempt: int
    token: str
    name: str

    @property
    def directory(self) -> str:
        return attempt_dir(self.namespace, self.job, self.uid, self.attempt, self.token)

    def chunk(self) -> int | None:
        """The chunk index of a chunk record (or of its unredacted original), else None."""
        n = self.name
        if n[:1] == "c" and n[1:7].isdigit() and n[7:] in (".json", ".original.json"):
            return int(n[1:7])
        return None


def parse_scratch(key: str) -> ScratchKey | None:
    """The parts of a key this layout writes under scratch/, or None for any other key."""
    parts = key.split("/")
    if len(parts) != 6 or parts[0] != SCRATCH or not all(parts):
        return None
    _, namespace, job, uid, directory, name = parts
    attempt, _, token = directory.partition("-")
    if not (attempt.startswith("a") and attempt[1:].isdigit() and len(token) == 32):
        return None
    return ScratchKey(namespace, job, uid, int(attempt[1:]), token, name)
