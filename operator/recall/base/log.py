"""Structured logging for every `recall` process.

Call `configure()` once per process. Log lines carry the event name as a constant message and
the data in fixed keys (`job`, `batch`, `item`, `worker`, `attempt`, `token`): JSON when stderr
is not a terminal or `RECALL_LOG_FORMAT=json`, key=value lines on a terminal. structlog's and
the standard library's lines (faster-whisper, kopf, the clients) reach stderr whole, one at a
time, so every JSON line parses.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Literal

import structlog

LogFormat = Literal["auto", "json", "console"]


def short_token(token: str | None) -> str | None:
    """The first 8 characters of a lease token: enough to tell leases apart, useless to forge."""
    return token[:8] if token else None


class _Stderr:
    """The current `sys.stderr` (test runners swap it), one write at a time. Whole lines only
    if each caller writes a line in one write, as `WriteLogger` and `StreamHandler` do."""

    _lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


_STDERR = _Stderr()


def configure(level: str = "info", fmt: LogFormat | None = None) -> None:
    """Set up structlog and the standard library logger (kopf and the clients use the latter)."""
    chosen = fmt or os.environ.get("RECALL_LOG_FORMAT", "auto")
    as_json = chosen == "json" or (chosen == "auto" and not sys.stderr.isatty())
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)

    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(
            colors=sys.stderr.isatty(), exception_formatter=structlog.dev.plain_traceback
        )
    )
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.WriteLoggerFactory(file=_STDERR),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(_STDERR)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=shared,
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    # The HTTP clients are chatty at INFO and say nothing the runtime's events do not.
    for noisy in ("urllib3", "kubernetes", "httpx", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def get(name: str | None = None) -> structlog.stdlib.BoundLogger:
    """A logger bound to the component name (`worker`, `operator`, ...)."""
    logger: structlog.stdlib.BoundLogger = structlog.get_logger(component=name)
    return logger
