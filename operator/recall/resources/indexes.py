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


def _join(runs: Iterable[tuple[int, int]], limit: int) -> tuple[str, bool]:
    """("0-99,101", truncated): the runs, cut at a run boundary past `limit` characters."""
    parts: list[str] = []
    size = 0
    for first, last in runs:
        part = str(first) if first == last else f"{first}-{last}"
        size += len(part) + (1 if parts else 0)
        if size > limit:
            return ",".join(parts), True
        parts.append(part)
    return ",".join(parts), False


def encode(indexes: Iterable[int], limit: int = MAX_ENCODED) -> tuple[str, bool]:
    """("0-99,101", truncated) for increasing `indexes`; "" when there are none."""
    return _join(ranges(indexes), limit)


def encode_runs(phases: bytes | bytearray, code: int, limit: int = MAX_ENCODED) -> tuple[str, bool]:
    """`encode` of the positions of `code` in `phases` (one byte per item), found in C."""
    runs = re.finditer(re.escape(bytes([code])) + b"+", phases)
    return _join(((m.start(), m.end() - 1) for m in runs), limit)


def whole_below(text: str | None, limit: int = MAX_ENCODED) -> int | None:
    """The index below which an encoding is known whole: one past its last index when it is
    long enough to have been cut (`_join` stops within one range of `limit`), else None."""
    if text is None or len(text) < limit - 32:
        return None
    return max(hi for _, hi in spans(text.rpartition(",")[2])) + 1


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
    for lo, hi in spans(text):
        yield from range(lo, hi + 1)


def count(text: str | None) -> int:
    """How many indexes an encoding holds, without expanding it (ValueError on garbage)."""
    return sum(hi - lo + 1 for lo, hi in spans(text))
