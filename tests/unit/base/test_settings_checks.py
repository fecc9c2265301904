"""Cross-field checks of the settings: a value that would only fail later (at the first failed
job, at the first election) is refused when the process starts."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from recall.base.settings import OperatorSettings, WorkerSettings


def test_worker__retry_base_above_cap_is_refused_naming_both_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RECALL_WORKER_RETRY_BASE_SECONDS", "600")
    with pytest.raises(ValidationError) as refused:
        WorkerSettings()
    message = str(refused.value)
    assert "RECALL_WORKER_RETRY_BASE_SECONDS" in message
    assert "RECALL_WORKER_RETRY_CAP_SECONDS" in message


def test_worker__retry_base_equal_to_cap_is_accepted() -> None:
    settings = WorkerSettings(retry_base_seconds=300, retry_cap_seconds=300)
    assert settings.retry_base_seconds == settings.retry_cap_seconds


def test_operator__sub_second_leader_lease_is_refused() -> None:
    # The Lease stores whole seconds: 0.9 would be written as 0, which the API server refuses.
    with pytest.raises(ValidationError):
        OperatorSettings(lease_duration=0.9, renew_deadline=0.5, retry_period=0.2)
    assert OperatorSettings(lease_duration=1, renew_deadline=0.5, retry_period=0.2)
