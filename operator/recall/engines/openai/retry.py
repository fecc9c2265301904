"""When the OpenAI-compatible engine tries a request again (pure): the statuses worth
repeating, the server's `Retry-After`, and the engine's `Backoff` (`recall.engines.openai`
states the contract)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from email.utils import parsedate_to_datetime

from recall.base.backoff import Backoff

BACKOFF_BASE = 1.0  # seconds before the first retry (before jitter)
BACKOFF_CAP = 30.0  # longest computed backoff
RETRY_AFTER_MAX = 120.0  # a server asking for a longer pause is treated as unavailable


def retriable_status(status: int) -> bool:
    """Statuses worth repeating the same request for."""
    return status in (408, 429) or 500 <= status <= 599


def parse_retry_after(value: str | None, now: dt.datetime) -> float | None:
    """Seconds a `Retry-After` header asks for (delta-seconds or an HTTP date), or None."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT by definition
        when = when.replace(tzinfo=dt.UTC)
    return max(0.0, (when - now).total_seconds())


def retry_backoff(max_retries: int, base: float = BACKOFF_BASE) -> Backoff:
    """The engine's computed backoff: `min(BACKOFF_CAP, base * 2**retry)` spread over
    [50 %, 100 %) of itself ("equal jitter": a `Backoff` from half of it, stretched by up to
    itself), for `max_retries` retries."""
    return Backoff(
        initial=min(base, BACKOFF_CAP) / 2,
        cap=BACKOFF_CAP / 2,
        jitter=1.0,
        steps=max(0, max_retries),
    )


def retry_delay(
    status: int | None,
    headers: Mapping[str, str],
    retry: int,
    now: dt.datetime,
    *,
    backoff: Backoff,
    u: float | None = None,
) -> float | None:
    """Seconds to wait before retrying, or None to stop. `status` None is a transport error;
    `retry` counts the retries made (0 after the first failure), none left once `backoff` is
    exhausted. A `Retry-After` is obeyed unless over `RETRY_AFTER_MAX`; else
    `backoff.delay(retry)`, its jitter share `u` given (pure) or drawn by the backoff."""
    if backoff.exhausted(retry):
        return None
    if status is not None and not retriable_status(status):
        return None
    header = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    asked = parse_retry_after(header, now) if status is not None else None
    if asked is not None:
        return asked if asked <= RETRY_AFTER_MAX else None
    return backoff.delay(retry, u=u)
