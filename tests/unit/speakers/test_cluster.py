"""Voices from vectors: the count found or bounded, fewer than asked, first appearance."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from recall.speakers.cluster import MAX_LINKED, Bounds, cluster


def voices(
    order: list[int], *, spread: float = 0.05, seed: int = 0, dims: int = 256
) -> npt.NDArray[np.float32]:
    """Unit vectors near one of a few well-separated positive centres (as GE2E's are:
    after ReLU), one per entry of `order` (the voice of each window)."""
    rng = np.random.default_rng(seed)
    k = max(order) + 1
    shared = np.abs(rng.standard_normal(dims))  # what every voice's vector has
    own = np.abs(rng.standard_normal((k, dims))) * (rng.random((k, dims)) < 0.3) * 5
    centres = shared + own
    out = centres[order] + spread * np.abs(rng.standard_normal((len(order), dims))) * 4
    return np.asarray(out / np.linalg.norm(out, axis=1, keepdims=True), np.float32)


def test_cluster__finds_the_count_and_numbers_voices_by_first_appearance() -> None:
    order = [2, 2, 0, 1, 0, 2, 1, 1, 0, 2] * 4
    found = cluster(voices(order), Bounds())
    assert found.count == 3 and not found.short
    assert found.labels.tolist() == [{2: 0, 0: 1, 1: 2}[v] for v in order]


def test_cluster__one_voice_is_one_label() -> None:
    found = cluster(voices([0] * 30), Bounds())
    assert found.count == 1 and found.labels.tolist() == [0] * 30


def test_cluster__a_count_asked_is_given_when_the_voices_are_there() -> None:
    order = [0, 1, 2, 3] * 10
    assert cluster(voices(order), Bounds(count=4)).count == 4
    assert cluster(voices(order), Bounds(count=2)).count == 2  # fewer: merged


def test_cluster__fewer_voices_than_asked_are_labelled_and_said() -> None:
    found = cluster(voices([0, 1] * 15), Bounds(count=4))
    assert found.count == 2 and found.short
    found = cluster(voices([0, 1] * 15), Bounds(least=3, most=5))
    assert found.count == 2 and found.short


def test_cluster__most_caps_the_count() -> None:
    found = cluster(voices([0, 1, 2, 3] * 10), Bounds(least=1, most=2))
    assert found.count == 2 and not found.short


def test_cluster__a_long_file_is_linked_on_a_sample_and_every_window_labelled() -> None:
    order = [0] * 1500 + [1] * 1500 + [0] * 500
    found = cluster(voices(order, spread=0.03), Bounds())
    assert len(order) > MAX_LINKED
    assert found.count == 2
    assert found.labels.tolist() == [0] * 1500 + [1] * 1500 + [0] * 500


def test_cluster__no_windows_no_voices() -> None:
    found = cluster(np.zeros((0, 256), np.float32), Bounds())
    assert found.count == 0 and len(found.labels) == 0


def two_centres(similarity: float, *, seed: int = 0, dims: int = 256) -> npt.NDArray[np.float64]:
    """Two unit centres whose cosine similarity is `similarity`."""
    rng = np.random.default_rng(seed)
    u = np.abs(rng.standard_normal(dims))
    u /= np.linalg.norm(u)
    d = rng.standard_normal(dims)
    d -= (d @ u) * u
    d /= np.linalg.norm(d)
    half = np.arccos(similarity) / 2
    return np.stack([u * np.cos(half) + d * np.sin(half), u * np.cos(half) - d * np.sin(half)])


def windows_of_turns(
    centres: npt.NDArray[np.float64], turns: list[tuple[int, int]], *, spread: float = 0.45,
    seed: int = 1,
) -> tuple[npt.NDArray[np.float32], list[int]]:  # fmt: skip
    """Windows (vectors in time order) for `turns` of (centre, windows): each its centre plus
    noise of norm about `spread` (a window lies ~0.91 from its voice's centre, as the model's
    do on speech)."""
    rng = np.random.default_rng(seed)
    order = [c for c, n in turns for _ in range(n)]
    noise = rng.standard_normal((len(order), centres.shape[1])) * spread / np.sqrt(centres.shape[1])
    out = centres[order] + noise
    return np.asarray(out / np.linalg.norm(out, axis=1, keepdims=True), np.float32), order


def turns_of(lengths: list[int], voices: int = 2) -> list[tuple[int, int]]:
    return [(i % voices, n) for i, n in enumerate(lengths)]


def test_cluster__one_voice_over_many_windows_is_one_label() -> None:
    vectors, _ = windows_of_turns(two_centres(0.999), [(0, 600)], spread=0.6)  # ~0.86 apart
    found = cluster(vectors, Bounds())
    assert found.count == 1 and set(found.labels.tolist()) == {0}


def test_cluster__one_voice_whose_phrases_differ_is_one_label() -> None:
    """A voice's windows drift between two sounds (a sentence's start, a vowel) window by
    window, their centres as far apart as two similar voices': no turns, one voice."""
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 3, 80).tolist()  # runs of 1-2 windows
    vectors, _ = windows_of_turns(two_centres(0.85), turns_of(lengths))
    assert cluster(vectors, Bounds()).count == 1
    found = cluster(vectors, Bounds(count=2))  # a count asked never splits a voice
    assert found.count == 1 and found.short


def test_cluster__halves_of_one_voice_in_turns_are_one_label() -> None:
    vectors, _ = windows_of_turns(two_centres(0.95), turns_of([6, 8, 5, 9, 7, 6]))
    assert cluster(vectors, Bounds()).count == 1


def test_cluster__two_similar_voices_taking_turns_are_two() -> None:
    vectors, order = windows_of_turns(two_centres(0.85), turns_of([6, 3, 8, 5, 4, 7, 3, 6]))
    found = cluster(vectors, Bounds())
    assert found.count == 2 and found.labels.tolist() == order


def test_cluster__two_distinct_voices_trading_one_window_turns_are_two() -> None:
    vectors, order = windows_of_turns(two_centres(0.5), turns_of([1] * 40))
    found = cluster(vectors, Bounds())
    assert found.count == 2 and found.labels.tolist() == order


def pair_among(
    similarity: float, *, apart: float, seed: int = 0, dims: int = 256
) -> npt.NDArray[np.float64]:
    """Four unit centres: two voices `apart` (cosine similarity `apart` ** 2 between their
    centres) and a pair whose centres lie `similarity` apart, around a third such centre."""
    rng = np.random.default_rng(seed)
    u = np.abs(rng.standard_normal(dims))
    u /= np.linalg.norm(u)
    basis = np.linalg.qr(np.column_stack([u, rng.standard_normal((dims, 3))]))[0][:, 1:]
    a = np.arccos(apart)
    one, two, mid = (u * np.cos(a) + basis[:, i] * np.sin(a) for i in range(3))
    d = rng.standard_normal(dims)
    d -= (d @ mid) * mid
    d /= np.linalg.norm(d)
    half = np.arccos(similarity) / 2
    return np.stack([one, two, mid * np.cos(half) + d * np.sin(half),
                     mid * np.cos(half) - d * np.sin(half)])  # fmt: skip


def test_cluster__two_close_voices_among_four_are_two() -> None:
    """As espeak-ng's en+f1 and en+f2 among others: the pair's centres 0.85 apart in cosine
    similarity, the other pairs' 0.68-0.72. Centred on the file's mean, the pair's windows
    join at 0.85 in average cosine distance, closer than any other two voices': a first cut
    above that leaves them one candidate, which no check can part again."""
    centres = pair_among(0.85, apart=0.85)
    lengths = np.random.default_rng(5).integers(2, 8, 16).tolist()
    vectors, order = windows_of_turns(centres, turns_of(lengths, voices=4))
    found = cluster(vectors, Bounds())
    assert found.count == 4
    assert found.labels.tolist() == order


def test_cluster__windows_of_the_same_audio_are_one_voice() -> None:
    """Identical vectors centre to zero rows, which have no cosine distance: one voice, no
    error, whatever the count asked."""
    for n in (2, 4):
        same = np.repeat(voices([0])[:1], n, axis=0)
        found = cluster(same, Bounds())
        assert found.count == 1 and found.labels.tolist() == [0] * n and not found.short
        assert cluster(same, Bounds(count=2)).short
