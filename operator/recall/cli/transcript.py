"""Where `recall transcript` finds an accepted transcript: through the job, or once the job is
gone, through its Batch's results index.
"""

from __future__ import annotations

from collections.abc import Callable

from recall.bucket import Bucket
from recall.kube import Api
from recall.transcripts import index_key


def find_transcript(
    store: Api, open_results: Callable[[], Bucket], namespace: str, ref: str
) -> tuple[Bucket, str]:
    """The results store and the key of the accepted transcript of `ref` (a job's name, or
    BATCH/ITEM); LookupError says what is missing. The store is opened only once the API server
    has named a transcript, so a missing job is reported as such whatever the store's
    configuration."""
    from recall.operator.reconcile.fanout import job_name

    batch, _, item = ref.partition("/")
    name = job_name(batch, item) if item else ref
    job = store.get_job(namespace, name)
    if job is not None:
        if job.status.result is None:
            raise LookupError(f"{name} has no transcript yet (phase {job.status.effective_phase})")
        return open_results(), job.status.result.transcript
    if not item:
        raise LookupError(f'transcriptionjobs.recall.dev "{name}" not found')
    owner = store.get_batch(namespace, batch)
    if owner is None:
        raise LookupError(f'batches.recall.dev "{batch}" not found (nor its job {name})')
    key = index_key(namespace, batch, owner.metadata.uid or "", item)
    results = open_results()
    if not results.exists(key):
        raise LookupError(
            f"{ref}: no job and no entry in the Batch's results index ({results.url_of(key)})"
        )
    return results, key
