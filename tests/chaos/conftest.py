"""The chaos runs print one line each at the end of the session (also when output is captured)."""

from __future__ import annotations

import pytest

LINES: list[str] = []


@pytest.fixture
def chaos_lines() -> list[str]:
    return LINES


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if LINES:
        terminalreporter.section("chaos")
        for line in LINES:
            terminalreporter.write_line(line)
