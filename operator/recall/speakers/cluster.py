"""Who is who: windows' speaker vectors grouped into voices (scipy's hierarchical clustering).
Pure.

    found = cluster(vectors, Bounds(count=None, least=1, most=20))
    found.labels    # one cluster index per vector, 0 = the voice heard first
    found.count     # voices found

Contract:
- A file whose windows lie (nine in ten) within `ONE_VOICE` of their mean direction has one
  voice. Otherwise the vectors are centred on the file's mean (what the file's voices share
  goes; what tells them apart stays) and linked by average linkage on cosine distances. The
  voices found are the clusters further apart than `SAME_VOICE` (cosine distance between
  their windows, on average). More than `count` (or `max`) are merged down to it; fewer than
  `count` (or `min`) are labelled as found, and `Found.short` says so: a voice is never
  split to reach a count (it would be labelled twice).
- At most `MAX_LINKED` windows are linked (the linkage is quadratic in memory: 2,000 windows
  take 16 MB); with more, an evenly spaced sample of them is, and every window then goes to
  the nearest cluster's centre. Memory and time therefore stay bounded whatever the length.
- Small clusters (under `MIN_SHARE` of the windows, or fewer than `MIN_WINDOWS`) are not
  voices (a window mixing two voices at a change of turn, a laugh, a cough) unless a count
  merged them: their windows go to the nearest voice.
- Labels are numbered by first appearance: the cluster of the first window is 0.
- Deterministic: the same vectors give the same labels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.cluster.hierarchy import fcluster, linkage

SAME_VOICE = 0.87  # average cosine distance (of centred vectors) under which two groups of
# windows are one voice
ONE_VOICE = 0.12  # nine windows in ten this close to their mean (raw cosine distance): one voice
MAX_LINKED = 2000
MIN_SHARE = 0.02  # of the windows: a voice heard less is not one (when the count is free)
MIN_WINDOWS = 2  # ... nor one heard in fewer windows than this

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
    """The voices of `vectors` (unit rows); see the module contract."""
    n = len(vectors)
    if n == 0:
        return Found(np.zeros(0, np.int64), 0, bounds.count is not None or bounds.least > 0)
    if n == 1:
        return Found(np.zeros(1, np.int64), 1, (bounds.count or bounds.least) > 1)
    picked = _sample(n)
    if _one_voice(vectors[picked]):
        return Found(np.zeros(n, np.int64), 1, (bounds.count or bounds.least) > 1)
    vectors = centred(vectors)
    tree = linkage(vectors[picked].astype(np.float64), method="average", metric="cosine")
    heights = tree[:, 2]  # merge distances, ascending; k clusters remain before merge n-k

    def clusters_at(distance: float) -> int:
        return int(len(picked) - np.searchsorted(heights, distance, side="right"))

    natural = clusters_at(SAME_VOICE)  # the voices found apart
    most = bounds.count if bounds.count is not None else bounds.most
    asked = bounds.count if bounds.count is not None else bounds.least
    want = min(natural, most, len(picked))
    sample_labels = fcluster(tree, t=want, criterion="maxclust") - 1
    centres = _centres(vectors[picked], sample_labels)
    if want == natural:  # not merged down to a count: a small group is not a voice
        centres = _without_small(centres, sample_labels, MIN_SHARE)
    labels = np.argmax(vectors @ centres.T, axis=1)
    count = len(np.unique(labels))
    return Found(_by_first_appearance(labels), count, count < asked)


def centred(vectors: Floats) -> Floats:
    """`vectors` less their mean, made unit again: what tells this file's voices apart."""
    c = vectors - vectors.mean(axis=0)
    return np.asarray(c / np.maximum(np.linalg.norm(c, axis=1, keepdims=True), 1e-9), np.float32)


def _one_voice(vectors: Floats) -> bool:
    """Nine windows in ten within `ONE_VOICE` of their mean direction: one voice."""
    mean = vectors.mean(axis=0)
    mean /= max(float(np.linalg.norm(mean)), 1e-9)
    return bool(np.quantile(1 - vectors @ mean, 0.9) < ONE_VOICE)


def _centres(vectors: Floats, labels: npt.NDArray[np.integer]) -> Floats:
    k = int(labels.max()) + 1
    centres = np.stack([vectors[labels == c].mean(axis=0) for c in range(k)])
    return np.asarray(centres / np.linalg.norm(centres, axis=1, keepdims=True), np.float32)


def _without_small(centres: Floats, labels: npt.NDArray[np.integer], share: float) -> Floats:
    sizes = np.bincount(labels, minlength=len(centres))
    small = (sizes < MIN_WINDOWS) | (sizes < share * len(labels))
    if small.all() or not small.any():
        return centres
    return centres[~small]


def _by_first_appearance(labels: npt.NDArray[np.integer]) -> Ints:
    order: dict[int, int] = {}
    for c in labels.tolist():
        order.setdefault(int(c), len(order))
    return np.array([order[int(c)] for c in labels.tolist()], np.int64)
