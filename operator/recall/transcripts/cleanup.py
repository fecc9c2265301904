"""Which of a job's transcript ConfigMaps nothing accepted references any more. Pure.

    names = unreferenced(job, store.list_config_maps(ns, job_selector(job.name)))

Rules, by the job's phase:
- Succeeded: everything but the result's manifest and the shards it lists.
- Failed, Cancelled: everything (nothing resumes them, nothing was accepted).
- Leased: the ConfigMaps of attempts older than the current one that the current checkpoint
  (its manifest and its shards) does not reference. The current attempt's own are kept: its
  holder writes a shard before the checkpoint that references it.
- Queued: the same, for every attempt so far (the next claim resumes from the checkpoint).
- Always: ConfigMaps whose `recall.dev/job-uid` names another job (left by a deleted job of
  the same name).

Safety contract (what makes a deletion never hit something referenced):
- Read the job FIRST, then list its ConfigMaps. The job may then be older than the list, never
  newer: a later attempt's ConfigMaps carry a higher attempt and are kept, and a later
  checkpoint references no older shards than the one read (a resumed attempt references a
  subset of what it resumed from).
- When the manifest the job references (result or checkpoint) is not in the list, nothing is
  named: without it the references are unknown.
- Only that manifest's data is read; every other ConfigMap may come with empty data (a
  metadata-only list plus one get of the referenced manifest is enough, and cheaper than a
  full list: shards hold up to 256 KiB each).
- ConfigMaps of kinds this module does not write are never named; while a job may still be
  resumed (Leased, Queued), neither are those without a readable attempt label.
"""

from __future__ import annotations

from recall.kube import ConfigMapData
from recall.resources import LABEL_JOB, Phase, TranscriptionJob, label_value
from recall.transcripts.layout import (
    KINDS,
    LABEL_ATTEMPT,
    LABEL_JOB_UID,
    LABEL_KIND,
    MANIFEST_KEY,
    Manifest,
)


def references(name: str, config_maps: dict[str, ConfigMapData]) -> set[str] | None:
    """`name` and every ConfigMap its manifest lists; None when `name` is not in the list or
    its manifest cannot be read (the references are then unknown)."""
    cm = config_maps.get(name)
    if cm is None:
        return None
    data = cm.data or {}
    if MANIFEST_KEY not in data:
        return {name}  # the single-ConfigMap layout of earlier versions
    try:
        return {name, *Manifest.from_data(data).references()}
    except ValueError:
        return None


def unreferenced(job: TranscriptionJob, config_maps: list[ConfigMapData]) -> list[str]:
    """The names of `job`'s transcript ConfigMaps to delete, sorted; see the module contract."""
    ours = {
        cm.name: cm
        for cm in config_maps
        if cm.labels.get(LABEL_JOB) == label_value(job.name) and cm.labels.get(LABEL_KIND) in KINDS
    }
    uid = job.metadata.uid
    foreign = {n for n, cm in ours.items() if uid and cm.labels.get(LABEL_JOB_UID, uid) != uid}
    own = {n: cm for n, cm in ours.items() if n not in foreign}
    status = job.status
    phase = status.effective_phase
    if phase in (Phase.FAILED, Phase.CANCELLED):
        return sorted(ours)
    if phase is Phase.SUCCEEDED:
        kept = references(status.result.config_map, own) if status.result else None
        if kept is None:
            return sorted(foreign)
        return sorted(set(ours) - kept)
    # Leased or Queued: only attempts that can no longer write, minus what the checkpoint uses.
    newest = status.attempts - 1 if phase is Phase.LEASED else status.attempts
    checkpoint = status.progress.checkpoint if status.progress else None
    kept = references(checkpoint, own) if checkpoint else set()
    if kept is None:
        return sorted(foreign)
    stale = {n for n, cm in own.items() if (a := _attempt(cm)) is not None and a <= newest} - kept
    return sorted(stale | foreign)


def _attempt(cm: ConfigMapData) -> int | None:
    value = cm.labels.get(LABEL_ATTEMPT, "")
    return int(value) if value.isdigit() else None
