"""The README documents every setting and the two commands."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_settings import BaseSettings

from recall.base.settings import ApiSettings, OperatorSettings, StoreSettings, WorkerSettings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


@pytest.mark.parametrize(
    ("cls", "prefix"),
    [
        (WorkerSettings, "RECALL_WORKER_"),
        (OperatorSettings, "RECALL_OPERATOR_"),
        (StoreSettings, "RECALL_STORE_"),
        (ApiSettings, "RECALL_API_"),
    ],
)
def test_readme__documents_every_setting(cls: type[BaseSettings], prefix: str) -> None:
    missing = [
        f"{prefix}{name.upper()}"
        for name in cls.model_fields
        if f"`{prefix}{name.upper()}`" not in README
    ]
    assert missing == []


def test_readme__shows_the_two_commands() -> None:
    assert "make demo" in README and "make test" in README
