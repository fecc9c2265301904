"""Where outputs are published: placeholders filled in, the format appended."""

from __future__ import annotations

import pytest

from recall.resources import Output, TranscriptionJob
from recall.transcripts import OutputInvalid, output_url


def job(batch: str | None = "talks", item: str | None = "monday") -> TranscriptionJob:
    spec: dict[str, object] = {"source": {"url": "file:///m.wav"}}
    if batch:
        spec |= {"batchRef": batch, "item": item}
    return TranscriptionJob.from_api(
        {
            "metadata": {"name": f"{batch}-{item}" if batch else "solo", "namespace": "ns"},
            "spec": spec,
        }
    )


def test_the_key_and_the_format_as_an_extension() -> None:
    out = Output(url="s3://media-out/talks/{key}", formats=["srt"])
    assert output_url(out, "srt", job()) == "s3://media-out/talks/monday.srt"


def test_every_placeholder_and_an_explicit_format() -> None:
    out = Output(url="gs://o/{namespace}/{batch}/{job}/{key}.{format}")
    assert output_url(out, "json", job()) == "gs://o/ns/talks/talks-monday/monday.json"


def test_a_job_of_its_own_is_keyed_by_its_name() -> None:
    assert output_url(Output(url="file:///out/{key}"), "txt", job(None)) == "file:///out/solo.txt"


def test_an_unknown_placeholder_is_refused_with_the_known_ones() -> None:
    with pytest.raises(OutputInvalid, match=r"\{key\}"):
        output_url(Output(url="s3://o/{item}"), "txt", job())
