"""A Batch's conditions, from its item counts. Pure.

`conditions` says Complete, Progressing and Failed (and ItemsInvalid while the items cannot be
used); `storage_conditions` Published and StorageFailing; `model_conditions` ModelFailing. Each
takes the conditions as stored and returns them with its own set afresh (a condition keeps its
lastTransitionTime while its status stays: `recall.resources.set_condition`). `fanned_out`
reads JobsCreated, which the projection sets once every item had its job.
"""

from __future__ import annotations

import datetime as dt

from recall.resources import Batch, BatchStatus, Condition, Counts, is_true, set_condition


def fanned_out(status: BatchStatus) -> bool:
    """True once every item had its job: a job missing after that is a heal."""
    return is_true(status.conditions, "JobsCreated")


def storage_conditions(
    current: list[Condition],
    counts: Counts,
    storage: tuple[str, str] | None,
    now: dt.datetime,
) -> list[Condition]:
    """Published (every completed item's result is published) and StorageFailing (the results
    store refused: jobs failed, or results cannot be published)."""
    out = list(current)
    left = counts.completed - counts.published
    if left > 0:
        text = f"{counts.published} of {counts.completed} completed items published"
        out = set_condition(out, "Published", "False", "Publishing", text, now)
    elif counts.completed:
        text = f"every completed item's result is published ({counts.published})"
        out = set_condition(out, "Published", "True", "AllPublished", text, now)
    if storage is not None:
        out = set_condition(out, "StorageFailing", "True", storage[0], storage[1][:1000], now)
    elif any(c.type == "StorageFailing" for c in out):
        out = set_condition(out, "StorageFailing", "False", "StorageOk", "the store answers", now)
    return out


def model_conditions(
    current: list[Condition], model: tuple[str, str] | None, now: dt.datetime
) -> list[Condition]:
    """ModelFailing: a job failed for a reason all the Batch's jobs share (model or language,
    `project.MODEL_REASONS`), said once with its message; each job keeps its own lastError."""
    if model is not None:
        return set_condition(current, "ModelFailing", "True", model[0], model[1][:1000], now)
    if any(c.type == "ModelFailing" for c in current):
        return set_condition(
            current, "ModelFailing", "False", "ModelOk", "no job failed for its model", now
        )
    return current


def conditions(
    current: list[Condition],
    batch: Batch,
    counts: Counts,
    finished: bool,
    invalid: str | None,
    now: dt.datetime,
) -> list[Condition]:
    """`finished`: every item is final; Complete also waits for the completed items' results
    to be published."""
    out = list(current)
    if invalid is not None:
        out = set_condition(out, "Complete", "False", "ItemsInvalid", invalid, now)
        out = set_condition(out, "Progressing", "False", "ItemsInvalid", invalid, now)
        return out
    if finished and counts.published < counts.completed:
        left = f"{counts.completed - counts.published} completed items' results to publish"
        out = set_condition(out, "Complete", "False", "Publishing", left, now)
        out = set_condition(out, "Progressing", "True", "Publishing", left, now)
    elif finished:
        summary = (
            f"{counts.completed} completed, {counts.failed} failed, {counts.cancelled} cancelled"
        )
        out = set_condition(out, "Complete", "True", "AllItemsFinished", summary, now)
        out = set_condition(out, "Progressing", "False", "Finished", "no items left", now)
    else:
        left = f"{counts.total - counts.done} of {counts.total} items left"
        out = set_condition(out, "Complete", "False", "ItemsRemaining", left, now)
        if batch.spec.suspend:
            out = set_condition(
                out, "Progressing", "False", "Suspended", "spec.suspend is true: no new claims", now
            )
        else:
            doing = f"{counts.transcribing} transcribing, {counts.queued} queued"
            out = set_condition(out, "Progressing", "True", "ItemsRemaining", doing, now)
    if counts.failed:
        out = set_condition(
            out, "Failed", "True", "ItemsFailed", f"{counts.failed} item(s) failed", now
        )
    else:
        out = set_condition(out, "Failed", "False", "NoFailures", "no item failed", now)
    return out
