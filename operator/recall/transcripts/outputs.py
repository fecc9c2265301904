"""Where a job's outputs are published: `spec.output.url` with its placeholders filled in. Pure.

Placeholders: `{key}` (the Batch item's key, or the job's name for a job of its own), `{job}`,
`{batch}` (empty for a job of its own), `{namespace}` and `{format}`; without `{format}` the
format is appended as an extension. Values are names the API server validated, so no '..' or
'/' comes from a placeholder and a filled-in URL never escapes its prefix.
"""

from __future__ import annotations

from recall.resources import Output, OutputFormat, TranscriptionJob


class OutputInvalid(ValueError):
    """The output URL has a placeholder this module does not know."""


def output_url(output: Output, fmt: OutputFormat, job: TranscriptionJob) -> str:
    """The URL the `fmt` output of `job` is published to."""
    values = {
        "key": job.spec.item or job.name,
        "job": job.name,
        "batch": job.spec.batch_ref or "",
        "namespace": job.namespace,
        "format": fmt,
    }
    url = output.url
    try:
        filled = url.format_map(values)
    except (KeyError, ValueError, IndexError) as e:
        raise OutputInvalid(
            f"spec.output.url {url!r}: unknown placeholder {e} (use {{key}}, {{job}}, "
            "{batch}, {namespace} or {format})"
        ) from None
    return filled if "{format}" in url else f"{filled}.{fmt}"
