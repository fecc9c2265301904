"""A Batch item's job takes the Batch's defaults: transcript options and vocabulary too."""

from __future__ import annotations

from typing import Any

from recall.operator.reconcile.fanout import job_for_item
from recall.operator.reconcile.items import Item
from recall.resources import Batch, TranscriptionJob


def batch_of(defaults: dict[str, Any]) -> Batch:
    """The Batch `talks` with `defaults`."""
    return Batch.from_api(
        {
            "metadata": {"name": "talks", "namespace": "ns", "uid": "u1"},
            "spec": {"defaults": defaults},
        }
    )


def test_job_for_item__carries_transcript_and_vocabulary_defaults() -> None:
    batch = batch_of(
        {
            "language": "auto",
            "transcript": {"words": True, "subtitles": {"maxLines": 1}},
            "vocabulary": ["Zarvethia", "Quonbril Station"],
        }
    )
    item = Item(index=0, key="monday", url="file:///media/monday.wav")
    job = TranscriptionJob.from_api(job_for_item(batch, item))
    assert job.spec.language == "auto"
    assert job.spec.transcript is not None and job.spec.transcript.words is True
    assert job.spec.transcript.subtitles is not None
    assert job.spec.transcript.subtitles.max_lines == 1
    assert job.spec.vocabulary == ["Zarvethia", "Quonbril Station"]


def test_job_for_item__language_options_and_scope_unless_the_item_fixes_its_language() -> None:
    batch = batch_of(
        {
            "language": "auto",
            "languageOptions": ["de", "fr", "en"],
            "languageScope": "segment",
            "transcript": {"translate": "en"},
        }
    )
    open_item = Item(index=0, key="monday", url="file:///media/monday.wav")
    job = TranscriptionJob.from_api(job_for_item(batch, open_item))
    assert job.spec.language_options == ["de", "fr", "en"]
    assert job.spec.language_scope == "segment"
    assert job.spec.transcript is not None and job.spec.transcript.translate == "en"
    known = Item(index=1, key="tuesday", url="file:///media/tuesday.wav", language="it")
    job = TranscriptionJob.from_api(job_for_item(batch, known))
    assert job.spec.language == "it"
    assert job.spec.language_options is None and job.spec.language_scope is None
