"""kopf's own settings as the operator sets them: its retries after API errors and 429s."""

from __future__ import annotations

import kopf

from recall.base.settings import OperatorSettings
from recall.operator.runtime.handlers import KOPF_BACKOFF, configure_kopf

KOPF_BACKOFFS = [KOPF_BACKOFF.base(i) for i in range(KOPF_BACKOFF.steps or 0)]


def test_error_backoffs__never_shorter_than_kopfs_and_different_at_each_use() -> None:
    settings = kopf.OperatorSettings()
    configure_kopf(settings, OperatorSettings(namespace="ns"))
    backoffs = settings.networking.error_backoffs
    assert not isinstance(backoffs, float | int)
    uses = [list(backoffs) for _ in range(20)]
    for use in uses:
        assert len(use) == len(KOPF_BACKOFFS) == 8  # as many retries as kopf's own
        assert all(b <= x <= 1.5 * b for b, x in zip(KOPF_BACKOFFS, use, strict=True))
        assert min(use) >= 1.0  # never sooner than APF's usual Retry-After of one second
    assert len({use[0] for use in uses}) > 1  # jittered: processes do not retry in step
