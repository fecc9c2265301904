"""Diarization error rate, as NIST's md-eval scores it: a reference and a hypothesis of who
spoke when, compared on a 10 ms grid.

    der = score(reference, hypothesis, collar=0.25)
    der.rate, der.missed, der.false_alarm, der.confusion      # shares of the reference's speech

Contract: turns are (speaker, start, end). The hypothesis's speakers are mapped one-to-one to
the reference's to maximise the time they share (Hungarian method, scipy). Frames within
`collar` seconds of a reference turn's start or end are not scored (a ±0.25 s collar is the
usual one). Overlapping speech is scored: a frame where two reference speakers talk counts
twice, and a hypothesis that names one of them misses the other. Per frame, missed =
max(0, ref - hyp), false alarm = max(0, hyp - ref), confusion = min(ref, hyp) - correct;
each is summed and divided by the reference's speaker-time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment

STEP = 0.01  # seconds a frame

Turns = Sequence[tuple[str, float, float]]


@dataclass(frozen=True)
class Der:
    missed: float
    false_alarm: float
    confusion: float
    scored: float  # seconds of reference speaker-time scored

    @property
    def rate(self) -> float:
        return self.missed + self.false_alarm + self.confusion


def _grid(turns: Turns, frames: int) -> tuple[list[str], np.ndarray]:
    names = sorted({t[0] for t in turns})
    grid = np.zeros((len(names), frames), bool)
    for who, start, end in turns:
        grid[names.index(who), round(start / STEP) : round(end / STEP)] = True
    return names, grid


def score(reference: Turns, hypothesis: Turns, *, collar: float = 0.25) -> Der:
    """The DER of `hypothesis` against `reference` (see the module contract)."""
    end = max([e for _, _, e in [*reference, *hypothesis]], default=0.0)
    frames = round(end / STEP) + 1
    _, ref = _grid(reference, frames)
    _, hyp = _grid(hypothesis, frames)
    scored = np.ones(frames, bool)
    c = round(collar / STEP)
    for _, start, stop in reference:
        for edge in (round(start / STEP), round(stop / STEP)):
            scored[max(0, edge - c) : edge + c] = False
    ref, hyp = ref[:, scored], hyp[:, scored]
    mapped = np.zeros_like(ref)
    if len(ref) and len(hyp):
        shared = ref.astype(np.int64) @ hyp.T.astype(np.int64)
        rows, cols = linear_sum_assignment(-shared)
        for r, h in zip(rows, cols, strict=True):
            mapped[r] = ref[r] & hyp[h]
    n_ref, n_hyp, correct = ref.sum(0), hyp.sum(0), mapped.sum(0)
    total = float(n_ref.sum())
    if total == 0:
        return Der(0.0, 0.0, 0.0, 0.0)
    missed = float(np.maximum(0, n_ref - n_hyp).sum()) / total
    false_alarm = float(np.maximum(0, n_hyp - n_ref).sum()) / total
    confusion = float((np.minimum(n_ref, n_hyp) - correct).sum()) / total
    return Der(missed, false_alarm, confusion, total * STEP)
