"""What the `recall` CLI does for users: submit media as Batches, list resources like kubectl,
print transcripts. Pure builders and formatters; the CLI wires them to the API.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recall.models import API_VERSION, Batch, TranscriptionJob

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
MAX_ITEMS = 1000  # the CRD's bound on spec.items


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


def collect(inputs: Sequence[str]) -> list[Media]:
    """Turn files, folders and URLs into media items with unique keys, in a stable order."""
    urls: list[tuple[str, str]] = []  # (name for the key, url)
    for raw in inputs:
        if re.match(r"^(https?|file)://", raw):
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


def batches_for(
    media: list[Media],
    *,
    name: str,
    language: str | None = None,
    engine: str | None = None,
    lease_seconds: int | None = None,
    max_attempts: int | None = None,
    priority: int | None = None,
    max_items: int = MAX_ITEMS,
) -> list[dict[str, Any]]:
    """Batch manifests for `media`: one, or several named name-1, name-2 ... of `max_items` each."""
    if max_items < 1 or max_items > MAX_ITEMS:
        raise SubmitError(f"--max-items must be between 1 and {MAX_ITEMS}")
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
    parts = [media[i : i + max_items] for i in range(0, len(media), max_items)]
    out = []
    for n, part in enumerate(parts, start=1):
        out.append(
            {
                "apiVersion": API_VERSION,
                "kind": "Batch",
                "metadata": {"name": name if len(parts) == 1 else f"{name}-{n}"},
                "spec": {
                    "items": [{"key": m.key, "source": {"url": m.url}} for m in part],
                    "defaults": defaults,
                },
            }
        )
    return out


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
            str(c.total if c else len(b.spec.items)),
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
