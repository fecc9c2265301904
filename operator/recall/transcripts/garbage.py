"""Which of a job's objects in the results store nothing accepted references any more. Pure.

Rules, by the job's phase as the operator last saw it (`JobView`):
- Succeeded: all but the transcript, the output formats and `original.json` of the attempt the
  result names (the transcript holds every segment).
- Failed, Cancelled: everything (nothing resumes them, nothing was accepted).
- Leased with attempt n: all of attempt n with the current token is kept (its holder writes an
  object before the renewal that names it); of the other attempts up to n, only the cutting and
  the chunk records the checkpoint's parts name.
- Queued with attempts n: the same kept, of every attempt up to n (the next claim resumes).
- Always kept: objects of attempts newer than the view (a claim not seen yet) and keys this
  layout does not write.

Safety contract (a deletion never hits something referenced):
- Take the view FIRST, then list. The view may then be older than the list, never newer: a
  later attempt's objects carry a higher attempt and are kept, and a later checkpoint names
  only parts it carried (a subset of what the view names) and its own (a newer attempt).
- An accepted result never changes (an API server rule): what a Succeeded view keeps stays kept.
- A job that is gone (or has another UID) is the caller's to decide, after reading it from the
  API server: all of its objects go.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from recall.resources import Part, Phase
from recall.transcripts.layout import (
    CUTTING,
    ORIGINAL,
    OUTPUT,
    TRANSCRIPT,
    ScratchKey,
    parse_scratch,
)


@dataclass(frozen=True, slots=True)
class JobView:
    """What garbage collection needs to know of a job, as last seen."""

    namespace: str
    name: str
    uid: str
    phase: Phase
    attempts: int
    token: str | None = None  # the current lease's, while Leased
    parts: tuple[Part, ...] = ()
    result: str | None = None  # status.result.transcript


def _kept_by_parts(key: ScratchKey, parts: tuple[Part, ...]) -> bool:
    chunk = key.chunk()
    return any(
        part.attempt == key.attempt
        and part.token == key.token
        and (key.name == CUTTING or (chunk is not None and part.first <= chunk < part.end))
        for part in parts
    )


def _is_result(key: ScratchKey, result: str) -> bool:
    if not result.startswith(key.directory):
        return False
    return key.name in (TRANSCRIPT, ORIGINAL) or key.name.startswith(f"{OUTPUT}.")


def garbage(view: JobView, keys: Iterable[str]) -> list[str]:
    """The keys of `view`'s job to delete, sorted; see the module contract."""
    out: list[str] = []
    job = (view.namespace, view.name, view.uid)
    for raw in keys:
        key = parse_scratch(raw)
        if key is None or (key.namespace, key.job, key.uid) != job:
            continue
        if view.phase in (Phase.FAILED, Phase.CANCELLED):
            out.append(raw)
        elif view.phase is Phase.SUCCEEDED:
            if view.result is not None and not _is_result(key, view.result):
                out.append(raw)
        elif key.attempt > view.attempts:
            continue  # newer than the view: a claim not seen yet
        elif (
            view.phase is Phase.LEASED and key.attempt == view.attempts and key.token == view.token
        ):
            continue  # the current holder's
        elif not _kept_by_parts(key, view.parts):
            out.append(raw)
    return sorted(out)
