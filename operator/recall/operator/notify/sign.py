"""The `Recall-Signature` header: HMAC-SHA256 over `<timestamp>.<body>` (docs/notify.md).

    Recall-Signature: t=1764849600,v1=5f2b...,v1=9ac0...

`t` is the Unix time of this try (each retry is signed afresh; the event's id and body stay
the same); one `v1` per key: two while a key is rotated (the Secret's `<key>` and
`<key>.next`). A receiver recomputes the HMAC with the key(s) it knows, accepts any match, and
refuses a `t` outside its window (`TOLERANCE`, five minutes), so a captured request cannot be
replayed later. Pure.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Sequence

HEADER = "Recall-Signature"
TOLERANCE = 300.0  # seconds a receiver accepts between `t` and its own clock
_STAMP = re.compile(r"[0-9]{1,15}")  # a Unix time: ASCII digits only, never too large a float


def digest(key: bytes, timestamp: int, body: bytes) -> str:
    return hmac.new(key, str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()


def sign(body: bytes, keys: Sequence[bytes], timestamp: int) -> str:
    """The header's value for `body` at `timestamp`, one signature per key."""
    if not keys:
        raise ValueError("an event is never sent unsigned")
    return ",".join([f"t={timestamp}", *(f"v1={digest(k, timestamp, body)}" for k in keys)])


def verify(
    header: str, body: bytes, keys: Sequence[bytes], now: float, tolerance: float = TOLERANCE
) -> bool:
    """Whether `header` signs `body` with one of `keys`, at a time within `tolerance` of `now`.
    False, never an exception, for any header: a malformed one (a `t` not of ASCII digits, a
    `v1` not ASCII) matches nothing."""
    fields = [part.split("=", 1) for part in header.split(",") if "=" in part]
    stamps = [v for k, v in fields if k == "t"]
    if len(stamps) != 1 or not _STAMP.fullmatch(stamps[0]):
        return False
    t = int(stamps[0])
    if abs(now - t) > tolerance:
        return False
    expected = [digest(k, t, body).encode() for k in keys]
    signatures = [v.encode() for k, v in fields if k == "v1" and v.isascii()]
    return any(hmac.compare_digest(v, e) for v in signatures for e in expected)
