"""An engine call's own exception reaches the caller, a TimeoutError too: on Python 3.11 it is
the class a wait for the call raises, and must not be taken for "still running"."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from recall.worker.engine_thread import EngineThreads


def fails(error: Exception) -> Any:
    def call() -> None:
        raise error

    return call


@pytest.mark.parametrize("error", [TimeoutError("the server did not answer"), ValueError("x")])
def test_call__the_engine_s_own_error_reaches_the_caller(error: Exception) -> None:
    threads = EngineThreads(check_stop=lambda h: None)
    try:
        with pytest.raises(type(error), match=str(error)):
            threads.call(None, threading.Event(), fails(error))  # type: ignore[arg-type]
    finally:
        threads.shutdown()
