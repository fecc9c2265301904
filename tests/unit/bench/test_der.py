"""The DER scorer on cases worked by hand."""

from __future__ import annotations

import pytest

from bench.der import score


def test_der__a_perfect_hypothesis_under_other_names_scores_zero() -> None:
    ref = [("a", 0.0, 10.0), ("b", 10.0, 20.0)]
    hyp = [("S2", 0.0, 10.0), ("S1", 10.0, 20.0)]
    assert score(ref, hyp).rate == 0.0


def test_der__confusion_missed_and_false_alarm_as_shares_of_the_reference() -> None:
    ref = [("a", 0.0, 10.0), ("b", 20.0, 30.0)]
    hyp = [("x", 0.0, 10.0), ("x", 20.0, 25.0), ("y", 40.0, 42.0)]
    d = score(ref, hyp, collar=0.0)
    assert d.confusion == pytest.approx(5 / 20)  # b's first half named as a's voice
    assert d.missed == pytest.approx(5 / 20)
    assert d.false_alarm == pytest.approx(2 / 20)


def test_der__the_collar_leaves_boundaries_unscored() -> None:
    ref = [("a", 0.0, 10.0), ("b", 10.0, 20.0)]
    hyp = [("a", 0.0, 10.2), ("b", 10.2, 20.0)]  # 0.2 s late at the change
    assert score(ref, hyp, collar=0.25).rate == 0.0
    assert score(ref, hyp, collar=0.0).rate == pytest.approx(0.2 / 20, abs=1e-3)


def test_der__overlap_is_scored_one_voice_named_misses_the_other() -> None:
    ref = [("a", 0.0, 10.0), ("b", 8.0, 18.0)]
    hyp = [("a", 0.0, 10.0), ("b", 10.0, 18.0)]
    d = score(ref, hyp, collar=0.0)
    assert d.missed == pytest.approx(2 / 20) and d.confusion == 0.0
