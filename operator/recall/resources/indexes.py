"""Compressed index ranges, as Kubernetes Indexed Jobs keep `completedIndexes`: "0-99,101".

Pure functions. `encode` turns increasing indexes into ranges, `decode` reads them back; an
encoding longer than `limit` characters is cut at a range boundary and reported truncated, so a
Batch status stays bounded whatever the pattern of its items.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

# Longest encoding kept per phase: the worst case (every other item) of 100,000 items needs
# about 300 KB; this bound keeps four of them plus the rest of a status well under etcd's limit.
MAX_ENCODED = 150_000


def ranges(indexes: Iterable[int]) -> Iterator[tuple[int, int]]:
    """Inclusive (first, last) runs of increasing `indexes`."""
    first = last = -2
    for i in indexes:
        if i == last + 1:
            last = i
            continue
        if first >= 0:
            yield first, last
        first = last = i
    if first >= 0:
        yield first, last


def encode(indexes: Iterable[int], limit: int = MAX_ENCODED) -> tuple[str, bool]:
    """("0-99,101", truncated) for increasing `indexes`; "" when there are none."""
    parts: list[str] = []
    size = 0
    for first, last in ranges(indexes):
        part = str(first) if first == last else f"{first}-{last}"
        if size + len(part) + (1 if parts else 0) > limit:
            return ",".join(parts), True
        size += len(part) + (1 if parts else 0)
        parts.append(part)
    return ",".join(parts), False


def encode_runs(phases: bytes | bytearray, code: int, limit: int = MAX_ENCODED) -> tuple[str, bool]:
    """`encode` of the positions of `code` in `phases` (one byte per item), found in C."""
    parts: list[str] = []
    size = 0
    for m in re.finditer(re.escape(bytes([code])) + b"+", phases):
        first, last = m.start(), m.end() - 1
        part = str(first) if first == last else f"{first}-{last}"
        if size + len(part) + (1 if parts else 0) > limit:
            return ",".join(parts), True
        size += len(part) + (1 if parts else 0)
        parts.append(part)
    return ",".join(parts), False


def spans(text: str | None) -> Iterator[tuple[int, int]]:
    """The inclusive (first, last) ranges of an encoding."""
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        first, sep, last = part.partition("-")
        lo = int(first)
        hi = int(last) if sep else lo
        if hi < lo:
            raise ValueError(f"bad index range {part!r}")
        yield lo, hi


def decode(text: str | None) -> Iterator[int]:
    """The indexes of an encoding (ignores blanks; raises ValueError on garbage)."""
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        first, sep, last = part.partition("-")
        lo = int(first)
        hi = int(last) if sep else lo
        if hi < lo:
            raise ValueError(f"bad index range {part!r}")
        yield from range(lo, hi + 1)


def count(text: str | None) -> int:
    """How many indexes an encoding holds, without expanding it."""
    total = 0
    for part in (text or "").split(","):
        part = part.strip()
        if part:
            first, sep, last = part.partition("-")
            total += (int(last) - int(first) + 1) if sep else 1
    return total
