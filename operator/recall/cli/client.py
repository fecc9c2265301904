"""What the `recall` CLI does for users: submit media as one Batch, list resources like kubectl,
print transcripts. Pure builders and formatters, and the few store calls they need.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recall.base.clock import SYSTEM
from recall.bucket import Bucket
from recall.kube import Api, Conflict, Owner, RawObject, Selector
from recall.resources import (
    API_VERSION,
    LABEL_BATCH,
    LABEL_COMPONENT,
    Batch,
    TranscriptionJob,
    label_value,
)
from recall.transcripts import index_key

MEDIA_SUFFIXES = frozenset(
    {
        ".wav",
        ".mp3",
        ".m4a",
        ".flac",
        ".ogg",
        ".oga",
        ".opus",
        ".webm",
        ".mp4",
        ".mkv",
        ".mov",
        ".aac",
        ".wma",
        ".aiff",
        ".aif",
    }
)
MAX_ITEMS = 1000  # the CRD's bound on inline spec.items


class SubmitError(ValueError):
    """The inputs cannot be submitted (a missing path, nothing to transcribe, ...)."""


@dataclass(frozen=True)
class Media:
    key: str
    url: str


def slug(text: str, limit: int = 63) -> str:
    """A DNS label from a file name: lower case, [a-z0-9-], no leading or trailing '-'."""
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return s[:limit].rstrip("-") or "item"


OBJECT_URL = re.compile(r"^(s3|gs|az)://[^/]+(/.*)?$")


def collect(
    inputs: Sequence[str], list_objects: Callable[[str], Iterable[str]] | None = None
) -> list[Media]:
    """Turn files, folders and URLs into media items with unique keys, in a stable order.

    A bucket prefix (`s3://bucket/talks/`, ending in '/') stands for every media object under
    it, listed with `list_objects` (the object URLs under a prefix, any number of them)."""
    urls: list[tuple[str, str]] = []  # (name for the key, url)
    for raw in inputs:
        if OBJECT_URL.match(raw) and raw.endswith("/"):
            if list_objects is None:
                raise SubmitError(f"{raw}: listing a bucket needs the store's credentials")
            found = sorted(
                u
                for u in list_objects(raw)
                if Path(u.split("?", 1)[0]).suffix.lower() in MEDIA_SUFFIXES
            )
            if not found:
                raise SubmitError(f"{raw}: no media objects under this prefix")
            urls += [(Path(u).stem or "media", u) for u in found]
            continue
        if re.match(r"^(https?|file|s3|gs|az)://", raw):
            name = raw.rstrip("/").rsplit("/", 1)[-1].split("?", 1)[0]
            urls.append((Path(name).stem or "media", raw))
            continue
        path = Path(raw).expanduser()
        if path.is_dir():
            files = sorted(
                p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in MEDIA_SUFFIXES
            )
            if not files:
                raise SubmitError(f"{raw}: no media files in this folder")
            urls += [(p.stem, p.resolve().as_uri()) for p in files]
        elif path.is_file():
            urls.append((path.stem, path.resolve().as_uri()))
        else:
            raise SubmitError(f"{raw}: no such file, folder or URL")
    if not urls:
        raise SubmitError("nothing to submit")
    seen: dict[str, int] = {}
    out = []
    for name, url in urls:
        base = slug(name, 56)
        n = seen.get(base, 0) + 1
        seen[base] = n
        out.append(Media(key=base if n == 1 else f"{base}-{n}", url=url))
    return out


LIST_BYTES = 900_000  # text per item-list ConfigMap, under the 1 MiB a ConfigMap holds
INLINE_BYTES = 120_000  # larger item sets go to lists (the CRD allows 150,000 characters)


@dataclass(frozen=True)
class Submission:
    """What `recall submit` creates: item lists (ConfigMaps, name → text), then one Batch."""

    batch: dict[str, Any]
    lists: dict[str, str]


def submission_for(
    media: list[Media],
    *,
    name: str,
    language: str | None = None,
    engine: str | None = None,
    lease_seconds: int | None = None,
    max_attempts: int | None = None,
    priority: int | None = None,
    output: str | None = None,
    formats: Sequence[str] = (),
    ttl_seconds: int | None = None,
) -> Submission:
    """One Batch for `media`: inline items when few and small, else lists in ConfigMaps
    (`<name>-items-<n>`, each under `LIST_BYTES`) that the Batch references."""
    defaults: dict[str, Any] = {}
    if language:
        defaults["language"] = language
    if engine:
        defaults["engine"] = {"name": engine}
    if lease_seconds is not None:
        defaults["leaseDurationSeconds"] = lease_seconds
    if max_attempts is not None:
        defaults["maxAttempts"] = max_attempts
    if priority is not None:
        defaults["priority"] = priority
    if output:
        defaults["output"] = {"url": output, "formats": list(formats) or ["json"]}
    spec: dict[str, Any] = {"defaults": defaults}
    if ttl_seconds is not None:
        spec["ttlSecondsAfterFinished"] = ttl_seconds
    size = sum(len(m.key) + len(m.url) + 40 for m in media)
    lists: dict[str, str] = {}
    if len(media) <= MAX_ITEMS and size <= INLINE_BYTES:
        spec["items"] = [{"key": m.key, "source": {"url": m.url}} for m in media]
    else:
        lines: list[str] = []
        used = 0
        for m in media:
            line = f"{m.key} {m.url}"
            if lines and used + len(line) + 1 > LIST_BYTES:
                lists[f"{name}-items-{len(lists) + 1}"] = "\n".join(lines) + "\n"
                lines, used = [], 0
            lines.append(line)
            used += len(line) + 1
        lists[f"{name}-items-{len(lists) + 1}"] = "\n".join(lines) + "\n"
        spec["itemsFrom"] = [{"configMap": cm, "key": "items"} for cm in lists]
    batch = {"apiVersion": API_VERSION, "kind": "Batch", "metadata": {"name": name}, "spec": spec}
    return Submission(batch=batch, lists=lists)


def default_batch_name(inputs: Sequence[str], now: dt.datetime) -> str:
    """The folder's name for one folder, else recall-<UTC timestamp>."""
    if len(inputs) == 1 and Path(inputs[0]).is_dir():
        return slug(Path(inputs[0]).resolve().name, 40)
    return f"recall-{now:%Y%m%d-%H%M%S}"


# --- tables ----------------------------------------------------------------------------------


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
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    lines = [
        "   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [list(headers), *rows]
    ]
    return "\n".join(lines)


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
        eta = (
            "-" if b.status.eta is None else f"{max(0, int((b.status.eta - now).total_seconds()))}s"
        )
        row = [
            b.name,
            str(c.total if c else len(b.spec.items) or "?"),
            str(c.completed if c else 0),
            str(c.failed if c else 0),
            b.status.progress or "0%",
            eta,
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


# --- talking to the API ----------------------------------------------------------------------


def submit_to(store: Api, namespace: str, plan: Submission) -> Batch:
    """Create the item lists (immutable ConfigMaps), then the Batch, then make the Batch own
    the lists, so deleting it removes them. A list left by an interrupted submit is reused."""
    name = plan.batch["metadata"]["name"]
    labels = {LABEL_BATCH: label_value(name), LABEL_COMPONENT: "items"}
    for cm, text in plan.lists.items():
        try:
            store.create_config_map(namespace, cm, {"items": text}, labels=labels, immutable=True)
        except Conflict:
            existing = store.get_config_map(namespace, cm)
            if existing is None or existing.data.get("items") != text:
                raise
    batch = store.create_batch(namespace, plan.batch)
    if batch.metadata.uid:
        owner = Owner(batch.api_version, batch.kind, batch.name, batch.metadata.uid)
        for cm in plan.lists:
            store.own_config_map(namespace, cm, owner)
    return batch


PLURALS = {
    "batches": "batches",
    "batch": "batches",
    "rb": "batches",
    "jobs": "jobs",
    "job": "jobs",
    "tj": "jobs",
    "transcriptionjobs": "jobs",
    "transcriptionjob": "jobs",
}


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
    """`recall get`: tables like kubectl's; jobs are listed 500 at a time, so a Batch of
    100,000 items prints as it reads. Raises LookupError for an unknown kind or name."""
    plural = PLURALS.get(kind)
    if plural is None:
        raise LookupError(
            f'the server doesn\'t have a resource type "{kind}" (use batches or jobs)'
        )
    wide = output == "wide" or namespace is None
    if plural == "batches":
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
        raw = [b.model_dump(mode="json", by_alias=True, exclude_none=True) for b in batches]
        _dump(raw, output, echo, single=len(names) == 1)
        return
    if not batches:
        echo("No resources found.", err=True)
        return
    headers, rows = batch_rows(batches, SYSTEM.now(), wide)
    echo(table(headers, rows))


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
    pages = _job_pages(store, namespace, Selector(fields=",".join(fields) or None))
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
        headers, rows = job_rows([TranscriptionJob.from_api(o) for o in page], now, wide)
        text = table(headers, rows)
        echo(text if shown == 0 else text.split("\n", 1)[1] if "\n" in text else "")
        shown += len(page)
    if shown == 0:
        echo("No resources found.", err=True)


def _job_pages(store: Api, namespace: str | None, selector: Selector) -> Iterator[list[RawObject]]:
    page = store.list_jobs(namespace, selector, limit=500)
    yield page.items
    while page.next:
        page = store.list_jobs(namespace, selector, limit=500, continue_from=page.next)
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


def find_transcript(
    store: Api, open_results: Callable[[], Bucket], namespace: str, ref: str
) -> tuple[Bucket, str]:
    """The results store and the key of the accepted transcript of `ref`: a job's name, or
    BATCH/ITEM.

    A Batch item's job is read first; once it is gone (the Batch's TTL deleted it), the Batch's
    results index has the transcript. The store is opened (`open_results`) only once the API
    server has named a transcript, so a job that does not exist is reported as such whatever
    the store's configuration. Raises LookupError saying what is missing.
    """
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
