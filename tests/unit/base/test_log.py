"""Logging (`recall.base.log`): structlog's lines and the standard library's, written from
several threads at once, each stay a whole JSON line."""

from __future__ import annotations

import io
import json
import logging
import sys
import threading
import time

import pytest
import structlog

from recall.base import log


class Yielding(io.StringIO):
    """A stream that hands the interpreter to another thread after every write, as a pipe
    that blocks would: a line written in two writes gets another thread's between them."""

    def write(self, text: str) -> int:
        n = super().write(text)
        time.sleep(0)
        return n


@pytest.fixture
def restored() -> object:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    config = structlog.get_config()
    yield None
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.configure(**config)


def test_configure__lines_of_both_loggers_from_many_threads_never_share_a_line(
    restored: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = Yielding()
    monkeypatch.setattr(sys, "stderr", out)
    log.configure("info", "json")
    ours, theirs = log.get("worker"), logging.getLogger("faster_whisper")
    start = threading.Barrier(4)

    def write(n: int) -> None:
        start.wait()
        for i in range(500):
            if n % 2:
                ours.info("chunk_done", chunk=i, writer=n)
            else:
                theirs.info("Processing audio with duration %d", i)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2_000
    events = [json.loads(line) for line in lines]  # each a whole JSON object
    assert sum(e["event"] == "chunk_done" for e in events) == 1_000
