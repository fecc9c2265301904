"""A Batch's items: inline in `spec.items`, and from lists in ConfigMaps (`spec.itemsFrom`).

Pure. Items are numbered in order, inline ones first, then each list in turn; the number is the
item's index in the Batch status (`completedIndexes: "0-99,101"`) and in the job's
`recall.dev/index` label. A list holds one item per line, `URL` or `KEY URL`; blank lines and
lines starting with `#` are skipped. An item without a key is keyed by its index, zero-padded
(`00042`), so job names sort like the list.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from recall.resources import Batch

KEY = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
URL = re.compile(r"^(file:///|https?://|(s3|gs|az)://[^/\s]+/)\S+$")
MAX_KEY = 63
MAX_URL = 2048
MAX_ITEMS = 1_000_000


class ItemsInvalid(ValueError):
    """The items cannot be used as given; the message says where and why."""


@dataclass(frozen=True, slots=True)
class Item:
    index: int
    key: str
    url: str
    language: str | None = None
    priority: int | None = None


def parse_list(text: str, *, source: str) -> list[tuple[str | None, str]]:
    """(key or None, url) for each item line of a list; raises `ItemsInvalid` naming the line."""
    out: list[tuple[str | None, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        if len(fields) > 2:
            raise ItemsInvalid(f"{source} line {number}: expected 'URL' or 'KEY URL'")
        key, url = (None, fields[0]) if len(fields) == 1 else (fields[0], fields[1])
        if key is not None and (len(key) > MAX_KEY or not KEY.match(key)):
            raise ItemsInvalid(
                f"{source} line {number}: key {key!r} is not a DNS label (a-z, 0-9, '-', "
                f"at most {MAX_KEY} characters)"
            )
        if len(url) > MAX_URL or not URL.match(url):
            raise ItemsInvalid(
                f"{source} line {number}: {url[:80]!r} is not a file:///, http:// or https:// URL"
            )
        out.append((key, url))
    return out


def resolve(batch: Batch, lists: dict[str, str]) -> list[Item]:
    """Every item of `batch`, numbered; `lists` maps "configmap/key" to the list's text. Raises
    `ItemsInvalid` for a missing list, a bad line, duplicate keys or too many items."""
    items = [
        Item(i, it.key, it.source.url, it.language, it.priority)
        for i, it in enumerate(batch.spec.items)
    ]
    listed: list[tuple[str | None, str]] = []
    for ref in batch.spec.items_from:
        name = f"{ref.config_map}/{ref.key}"
        if name not in lists:
            raise ItemsInvalid(f"ConfigMap {ref.config_map} has no key {ref.key!r} (or is missing)")
        listed += parse_list(lists[name], source=f"ConfigMap {ref.config_map} key {ref.key}")
    total = len(items) + len(listed)
    if total > MAX_ITEMS:
        raise ItemsInvalid(f"{total} items: a Batch holds at most {MAX_ITEMS}")
    width = max(5, len(str(max(0, total - 1))))
    for n, (key, url) in enumerate(listed, start=len(items)):
        items.append(Item(n, key or f"{n:0{width}d}", url))
    seen: dict[str, int] = {}
    for it in items:
        if it.key in seen:
            raise ItemsInvalid(f"items {seen[it.key]} and {it.index} have the same key {it.key!r}")
        seen[it.key] = it.index
    return items
