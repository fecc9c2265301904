"""What `recall submit` creates: media items collected from files, folders, URLs and bucket
prefixes, one Batch of them (its items inline, or in item-list ConfigMaps when many), and the
calls that create them. Pure builders, then `submit_to`, the one that talks to the API server.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from recall.cli.common import given
from recall.kube import Api, Conflict, Owner
from recall.resources import API_VERSION, LABEL_BATCH, LABEL_COMPONENT, Batch, label_value

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
    """Files, folders and URLs as media items with unique keys, in a stable order. A bucket
    prefix (ending in '/') stands for every media object under it, listed by `list_objects`."""
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
            urls += [(Path(unquote(u)).stem or "media", u) for u in found]  # keys encoded
            continue
        if re.match(r"^(https?|file|s3|gs|az)://", raw):
            name = raw.rstrip("/").rsplit("/", 1)[-1].split("?", 1)[0]
            urls.append((Path(unquote(name)).stem or "media", raw))
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
    keys = unique_keys(name for name, _ in urls)
    return [Media(key, url) for key, (_, url) in zip(keys, urls, strict=True)]


def unique_keys(names: Iterable[str]) -> list[str]:
    """One distinct key per name, in order: the name's slug, and for each repeat of a slug
    `<slug>-<n>` with the lowest n >= 2 that no name's slug is and no earlier key took (a.mp3,
    a.wav, a-2.mp3 give a, a-3, a-2). A name whose slug is its own keeps it."""
    bases = [slug(name, 56) for name in names]  # room for "-<n>" within 63 characters
    reserved, used = set(bases), set[str]()
    keys = []
    for base in bases:
        key, n = base, 1
        while key in used or (n > 1 and key in reserved):
            n += 1
            key = f"{base}-{n}"
        used.add(key)
        keys.append(key)
    return keys


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
    defaults = given(
        language=language or None,
        engine={"name": engine} if engine else None,
        leaseDurationSeconds=lease_seconds,
        maxAttempts=max_attempts,
        priority=priority,
        output={"url": output, "formats": list(formats) or ["json"]} if output else None,
    )
    spec: dict[str, Any] = {"defaults": defaults}
    if ttl_seconds is not None:
        spec["ttlSecondsAfterFinished"] = ttl_seconds
    size = sum(len(m.key) + len(m.url) + 40 for m in media)
    lists: dict[str, str] = {}
    if len(media) <= MAX_ITEMS and size <= INLINE_BYTES:
        spec["items"] = [{"key": m.key, "source": {"url": m.url}} for m in media]
    else:
        text = ""
        for m in media:
            line = f"{m.key} {m.url}\n"
            if text and len(text) + len(line) > LIST_BYTES:
                lists[f"{name}-items-{len(lists) + 1}"] = text
                text = ""
            text += line
        lists[f"{name}-items-{len(lists) + 1}"] = text
        spec["itemsFrom"] = [{"configMap": cm, "key": "items"} for cm in lists]
    batch = {"apiVersion": API_VERSION, "kind": "Batch", "metadata": {"name": name}, "spec": spec}
    return Submission(batch=batch, lists=lists)


def default_batch_name(inputs: Sequence[str], now: dt.datetime) -> str:
    """The folder's name for one folder, else recall-<UTC timestamp>."""
    if len(inputs) == 1 and Path(inputs[0]).is_dir():
        return slug(Path(inputs[0]).resolve().name, 40)
    return f"recall-{now:%Y%m%d-%H%M%S}"


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
