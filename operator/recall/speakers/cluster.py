"""Who is who: windows' speaker vectors grouped into voices (scipy's hierarchical clustering).
Pure.

    found = cluster(vectors, Bounds(count=None, least=1, most=20))
    found.labels    # one cluster index per vector (in time order), 0 = the voice heard first
    found.count     # voices found

Contract:
- Candidates: the vectors centred on the file's mean (what the file's voices share goes), linked
  by average linkage on cosine distances, cut where groups lie further apart than `SAME_VOICE`;
  every window goes to the nearest candidate's centre. A window at the file's mean (every
  window the same audio, as two short stretches before the first second share one) tells no
  voice apart: it is not linked, and a file of only such windows is one voice.
- A candidate must then prove it is a voice, else its windows go to the nearest other one, the
  weakest first, until every one left passes:
  1. it is heard in at least `MIN_WINDOWS` windows and `MIN_SHARE` of them (a window mixing
     two voices at a change of turn, a laugh, a cough are not voices);
  2. its centre (of the model's own vectors, not centred) is further than `SAME_CENTRE`
     (cosine similarity) from every other: halves of one voice lie closer than two voices;
  3. near another's centre (`NEAR_CENTRE`), it speaks in turns: its windows come in runs of
     `MIN_RUN` or more on average. What tells one voice's phrases apart comes and goes window
     by window; a voice holds the floor for a turn. Two similar voices that only trade turns
     shorter than `MIN_RUN` windows are therefore one voice.
- More voices than `count` (or `max`) are merged down to it, the two nearest first; fewer than
  `count` (or `min`) are labelled as found, with `Found.short`: a voice is never split to reach
  a count (it would be labelled twice).
- The thresholds are calibrated on espeak-ng dialogues of 1-4 voices the bench does not score
  (`bench/speakers_calibrate.py`); docs/transcripts.md gives what they miss.
- At most `MAX_LINKED` windows are linked (the linkage is quadratic in memory: 2,000 take
  16 MB), an evenly spaced sample of more; the checks run over every window, a few passes of
  (windows × candidates): memory and time stay bounded.
- Deterministic; labels are numbered by first appearance (the first window's cluster is 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.cluster.hierarchy import fcluster, linkage

SAME_VOICE = 0.75  # average cosine distance (of centred vectors) under which two groups of
# windows are one candidate: low enough that two close voices stay two candidates (the checks
# below merge the pieces of one voice; no check parts what this cut has joined)
SAME_CENTRE = 0.9  # cosine similarity of two candidates' centres above which they are one voice
NEAR_CENTRE = 0.75  # ... above which a candidate must also speak in turns
MIN_RUN = 2.0  # windows in a row, on average, that a voice near another holds
MAX_LINKED = 2000
MIN_SHARE = 0.02  # of the windows: a voice heard less is not one
MIN_WINDOWS = 3  # ... nor one heard in fewer windows than this
AT_MEAN = 1e-4  # length of a centred vector under which its window is the file's mean

Floats = npt.NDArray[np.float32]
Ints = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Bounds:
    """How many voices to find: exactly `count`, or between `least` and `most`."""

    count: int | None = None
    least: int = 1
    most: int = 20


@dataclass(frozen=True)
class Found:
    labels: Ints  # one per vector, numbered by first appearance
    count: int  # voices found
    short: bool  # fewer than the count or the least asked for were there


def _sample(n: int) -> Ints:
    if n <= MAX_LINKED:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, MAX_LINKED).round().astype(np.int64))


def cluster(vectors: Floats, bounds: Bounds) -> Found:
    """The voices of `vectors` (unit rows, in time order); see the module contract."""
    n = len(vectors)
    asked = bounds.count if bounds.count is not None else bounds.least
    most = bounds.count if bounds.count is not None else bounds.most
    if n < 2:
        return Found(np.zeros(n, np.int64), n, n < asked)
    shifted = centred(vectors)
    picked = _sample(n)
    picked = picked[shifted[picked].any(axis=1)]  # a zero row has no cosine distance
    if len(picked) < 2:  # every window alike: nothing tells voices apart
        return Found(np.zeros(n, np.int64), 1, asked > 1)
    tree = linkage(shifted[picked].astype(np.float64), method="average", metric="cosine")
    candidates = fcluster(tree, t=SAME_VOICE, criterion="distance") - 1
    centres = _centres(shifted[picked], candidates)
    while True:
        labels = np.argmax(shifted @ centres.T, axis=1)
        drop = _weakest(vectors, labels, len(centres), max(1, most))
        if drop is None:
            break
        keep = np.ones(len(centres), bool)
        keep[drop] = False
        labels = np.argmax(shifted @ centres[keep].T, axis=1)
        centres = _centres(shifted, labels)
    count = len(np.unique(labels))
    return Found(_by_first_appearance(labels), count, count < asked)


def _weakest(vectors: Floats, labels: Ints, k: int, most: int) -> Ints | None:
    """The candidates (of `k`) that are not voices (see the contract, in its order), or None."""
    if k == 1:
        return None
    sizes = np.bincount(labels, minlength=k)
    small = (sizes < MIN_WINDOWS) | (sizes < MIN_SHARE * len(labels))
    if small.all():  # crumbs only: the smaller half goes, the rest grow
        return np.flatnonzero(sizes <= np.median(sizes))[: k - 1]
    if small.any():
        return np.flatnonzero(small)
    raw = _centres(vectors, labels)
    near = raw @ raw.T
    np.fill_diagonal(near, -1.0)
    i, j = np.unravel_index(int(np.argmax(near)), near.shape)
    smaller = i if sizes[i] < sizes[j] else j
    if k > most or near[i, j] > SAME_CENTRE:
        return np.array([smaller])
    runs = np.array([_mean_run(labels, c) for c in range(k)])
    fleeting = (runs < MIN_RUN) & (near.max(axis=1) > NEAR_CENTRE)
    if fleeting.any():
        return np.array([int(np.argmin(np.where(fleeting, runs, np.inf)))])
    return None


def _mean_run(labels: Ints, c: int) -> float:
    """Windows in a row that candidate `c` holds, on average (in time order)."""
    mine = np.concatenate([[False], labels == c])
    runs = int(np.count_nonzero(mine[1:] & ~mine[:-1]))
    return float(np.count_nonzero(mine)) / max(runs, 1)


def centred(vectors: Floats) -> Floats:
    """`vectors` less their mean, made unit again: what tells this file's voices apart; a
    vector at the mean (shorter than `AT_MEAN`: float noise, no direction) is zero."""
    c = vectors - vectors.mean(axis=0)
    norms = np.linalg.norm(c, axis=1, keepdims=True)
    return np.asarray(np.where(norms < AT_MEAN, 0.0, c / np.maximum(norms, AT_MEAN)), np.float32)


def _centres(vectors: Floats, labels: npt.NDArray[np.integer]) -> Floats:
    """The unit mean of each label's vectors, in label order (a label without any has none)."""
    order = np.argsort(labels, kind="stable")
    starts = np.flatnonzero(np.diff(labels[order], prepend=-1))
    sums = np.add.reduceat(vectors[order].astype(np.float64), starts, axis=0)
    return np.asarray(sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-9),
                      np.float32)  # fmt: skip


def _by_first_appearance(labels: npt.NDArray[np.integer]) -> Ints:
    order = {c: k for k, c in enumerate(dict.fromkeys(labels.tolist()))}
    return np.array([order[c] for c in labels.tolist()], np.int64)
