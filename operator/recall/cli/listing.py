"""`recall get`: Batches and TranscriptionJobs as kubectl prints them: a table (its columns
aligned over the whole output; NAMESPACE in the jobs' with every namespace, in the Batches'
with `-o wide`), `-o wide`, `name`,
or the objects as the API server holds them (`yaml`, `json`); any other `-o` is refused, as
kubectl refuses it. Jobs are read 500 at a time (`-o name` prints as it reads). An object the
models cannot read is left out of a table with a one-line warning naming it; the rest are
listed. The rows are pure.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

from pydantic import ValidationError

from recall.base.clock import SYSTEM
from recall.kube import Api, RawObject, Selector
from recall.kube.verbs import BATCHES
from recall.resources import Batch, TranscriptionJob

OUTPUTS = ("json", "name", "wide", "yaml")


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
    jobs: list[TranscriptionJob], now: dt.datetime, wide: bool = False, namespaces: bool = False
) -> tuple[list[str], list[list[str]]]:
    """The jobs' table; with `namespaces` (every namespace listed) a NAMESPACE column, where
    the Batch table has it."""
    headers = ["NAME", "PHASE", "HOLDER", "ATTEMPTS", "PROGRESS", "AGE"]
    if namespaces:
        headers[1:1] = ["NAMESPACE"]
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
        if namespaces:
            row[1:1] = [j.namespace]
        if wide:
            err = (
                f"{s.last_error.reason}: {s.last_error.message or ''}"[:60] if s.last_error else ""
            )
            row += [j.spec.batch_ref or "", str(s.expired_leases), str(s.failures), err]
        rows.append(row)
    return headers, rows


BATCH_KINDS = ("batches", "batch", "rb")
JOB_KINDS = ("jobs", "job", "tj", "transcriptionjobs", "transcriptionjob")


def check_output(output: str | None) -> None:
    """Raises LookupError for an `-o` with no printer here, in kubectl's words."""
    if output is not None and output not in OUTPUTS:
        raise LookupError(
            f'unable to match a printer suitable for the output format "{output}", '
            f"allowed formats are: {','.join(OUTPUTS)}"
        )


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
    """`recall get` (see the module doc); raises LookupError for an unknown kind, name or
    output format."""
    check_output(output)
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
    objs = store.verbs.list(BATCHES, namespace).items
    if names:
        objs = [o for o in objs if _name(o) in names]
        _missing(names, {_name(o) for o in objs}, "batches")
    if output in ("yaml", "json"):
        _dump(objs, output, echo, single=len(names) == 1)
        return
    if output == "name":
        for o in objs:
            echo(f"batch.recall.dev/{_name(o)}")
    elif batches := readable(Batch, objs, "batch.recall.dev", echo):
        echo(table(*batch_rows(batches, SYSTEM.now(), wide)))
    if not objs:
        echo("No resources found.", err=True)


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
    now, found = SYSTEM.now(), 0
    headers, rows = job_rows([], now, wide, namespaces=namespace is None)
    for page in pages:
        found += len(page)
        if output == "name":
            for o in page:
                echo(f"transcriptionjob.recall.dev/{_name(o)}")
            continue
        read = readable(TranscriptionJob, page, "transcriptionjob.recall.dev", echo)
        rows += job_rows(read, now, wide, namespaces=namespace is None)[1]
    if rows:
        echo(table(headers, rows))
    if found == 0:
        echo("No resources found.", err=True)


Model = TypeVar("Model", Batch, TranscriptionJob)


def readable(
    model: type[Model], objs: list[RawObject], kind: str, echo: Callable[..., None]
) -> list[Model]:
    """The objects the model reads; each other one is named in a one-line warning on stderr
    (an object stored before its CRD refused it, say without a spec) and left out."""
    out = []
    for o in objs:
        try:
            out.append(model.from_api(o))
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(map(str, first["loc"])) or "the object"
            namespace = (o.get("metadata") or {}).get("namespace")
            echo(
                f"warning: {kind}/{_name(o)} in namespace {namespace} cannot be read "
                f"({where}: {first['msg']}); left out",
                err=True,
            )
    return out


def _name(obj: RawObject) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


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
