"""`recall get`: Batches and TranscriptionJobs as kubectl's tables, yaml or json; jobs are
read 500 at a time, so a Batch of 100,000 items prints as it reads. The rows are pure.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Iterator, Sequence

from recall.base.clock import SYSTEM
from recall.kube import Api, RawObject, Selector
from recall.resources import Batch, TranscriptionJob


def age(created: dt.datetime | None, now: dt.datetime) -> str:
    """kubectl's short age: 45s, 3m, 2h, 5d."""
    if created is None:
        return "<unknown>"
    seconds = max(0, int((now - created).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * (2 if unit != "d" else 1):
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Columns aligned with three spaces, like kubectl's tables."""
    rows = [list(map(str, r)) for r in rows]
    widths = [max(map(len, column)) for column in zip(headers, *rows, strict=True)]
    return "\n".join(
        "   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [headers, *rows]
    )


def eta(batch: Batch, now: dt.datetime) -> str:
    if batch.status.eta is None:
        return "-"
    return f"{max(0, int((batch.status.eta - now).total_seconds()))}s"


def batch_rows(
    batches: list[Batch], now: dt.datetime, wide: bool = False
) -> tuple[list[str], list[list[str]]]:
    headers = ["NAME", "ITEMS", "COMPLETED", "FAILED", "PROGRESS", "ETA", "AGE"]
    if wide:
        headers[1:1] = ["NAMESPACE"]
        headers += ["RECLAIMS", "HEALS", "SUSPENDED"]
    rows = []
    for b in batches:
        c = b.status.counts
        row = [
            b.name,
            str(c.total if c else len(b.spec.items) or "?"),
            str(c.completed if c else 0),
            str(c.failed if c else 0),
            b.status.progress or "0%",
            eta(b, now),
            age(b.metadata.creation_timestamp, now),
        ]
        if wide:
            row[1:1] = [b.namespace]
            row += [
                str(b.status.expired_leases or 0),
                str(b.status.heals or 0),
                str(b.spec.suspend).lower(),
            ]
        rows.append(row)
    return headers, rows


def job_rows(
    jobs: list[TranscriptionJob], now: dt.datetime, wide: bool = False
) -> tuple[list[str], list[list[str]]]:
    headers = ["NAME", "PHASE", "HOLDER", "ATTEMPTS", "PROGRESS", "AGE"]
    if wide:
        headers += ["BATCH", "EXPIRED", "FAILURES", "LAST ERROR"]
    rows = []
    for j in jobs:
        s = j.status
        row = [
            j.name,
            s.effective_phase.value,
            s.lease.holder if s.lease else "",
            str(s.attempts),
            (s.progress.summary or "") if s.progress else "",
            age(j.metadata.creation_timestamp, now),
        ]
        if wide:
            err = (
                f"{s.last_error.reason}: {s.last_error.message or ''}"[:60] if s.last_error else ""
            )
            row += [j.spec.batch_ref or "", str(s.expired_leases), str(s.failures), err]
        rows.append(row)
    return headers, rows


BATCH_KINDS = ("batches", "batch", "rb")
JOB_KINDS = ("jobs", "job", "tj", "transcriptionjobs", "transcriptionjob")


def get_command(
    store: Api,
    kind: str,
    names: list[str],
    namespace: str | None,
    *,
    output: str | None,
    batch: str | None,
    phase: str | None,
    echo: Callable[..., None],
) -> None:
    """`recall get` (see the module doc); raises LookupError for an unknown kind or name."""
    if kind not in BATCH_KINDS + JOB_KINDS:
        raise LookupError(
            f'the server doesn\'t have a resource type "{kind}" (use batches or jobs)'
        )
    wide = output == "wide" or namespace is None
    if kind in BATCH_KINDS:
        _get_batches(store, names, namespace, output, wide, echo)
    else:
        _get_jobs(store, names, namespace, output, wide, batch, phase, echo)


def _get_batches(
    store: Api,
    names: list[str],
    namespace: str | None,
    output: str | None,
    wide: bool,
    echo: Callable[..., None],
) -> None:
    batches = store.list_batches(namespace)
    if names:
        batches = [b for b in batches if b.name in names]
        _missing(names, {b.name for b in batches}, "batches")
    if output in ("yaml", "json"):
        _dump([b.to_api() for b in batches], output, echo, single=len(names) == 1)
        return
    if not batches:
        echo("No resources found.", err=True)
        return
    echo(table(*batch_rows(batches, SYSTEM.now(), wide)))


def _get_jobs(
    store: Api,
    names: list[str],
    namespace: str | None,
    output: str | None,
    wide: bool,
    batch: str | None,
    phase: str | None,
    echo: Callable[..., None],
) -> None:
    fields = [f"spec.batchRef={batch}"] if batch else []
    if phase:
        fields.append(f"status.phase={phase}")
    pages = job_pages(store, namespace, Selector(fields=",".join(fields) or None), limit=500)
    if output in ("yaml", "json") or names:
        jobs = [j for page in pages for j in page if not names or j["metadata"]["name"] in names]
        if names:
            _missing(names, {j["metadata"]["name"] for j in jobs}, "transcriptionjobs")
        if output in ("yaml", "json"):
            _dump(jobs, output, echo, single=len(names) == 1)
            return
        pages = iter([jobs])
    now = SYSTEM.now()
    shown = 0
    for page in pages:
        if not page:
            continue
        text = table(*job_rows([TranscriptionJob.from_api(o) for o in page], now, wide))
        echo(text if shown == 0 else text.partition("\n")[2])
        shown += len(page)
    if shown == 0:
        echo("No resources found.", err=True)


def job_pages(
    store: Api, namespace: str | None, selector: Selector, limit: int | None = None
) -> Iterator[list[RawObject]]:
    page = store.list_jobs(namespace, selector, limit=limit)
    yield page.items
    while page.next:
        page = store.list_jobs(namespace, selector, limit=limit, continue_from=page.next)
        yield page.items


def _missing(wanted: list[str], found: set[str], plural: str) -> None:
    missing = sorted(set(wanted) - found)
    if missing:
        raise LookupError(f'{plural}.recall.dev "{missing[0]}" not found')


def _dump(objs: list[RawObject], output: str, echo: Callable[..., None], *, single: bool) -> None:
    import json

    import yaml

    doc: RawObject = (
        objs[0]
        if single and len(objs) == 1
        else {"apiVersion": "v1", "kind": "List", "items": objs}
    )
    echo(yaml.safe_dump(doc, sort_keys=False) if output == "yaml" else json.dumps(doc, indent=2))
