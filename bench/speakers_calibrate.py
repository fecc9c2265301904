"""The speaker count's thresholds (`recall.speakers.cluster`), calibrated on dialogues the
`speakers` bench never scores.

    .venv/bin/python -m bench.speakers_calibrate make      # transcribe and embed (~15 min)
    .venv/bin/python -m bench.speakers_calibrate score     # the count and DER, as shipped
    .venv/bin/python -m bench.speakers_calibrate sweep     # the thresholds tried

The calibration set: 1 to 4 voices, `FILES` files each, seeds `CALIBRATION + 1000 n + k`
(the bench scores seeds `1000 n + k`, k < 5: the two sets share no file). A one-voice file is
a dialogue whose turns all have one voice (`monologue`). Besides, `CLOSE_FILES` files each of
2 to 4 voices that always hold the nearest pair of the dialogues' voices (`CLOSE`, espeak-ng's
two female variants), seeds `CLOSE_SEEDS + 1000 n + k`: drawn at random, only a few files of
four voices would hold both. Each file is transcribed as the bench does, its windows
embedded once, both kept in `CACHE`; each window's vectors twice, from the words' windows
and from the segments' (a job whose engine gives no words), so any clustering can be scored
on them in seconds. Scored: the share of files whose count is the true one, and the mean DER
(`bench.der`, 0.25 s collar).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import sys
import wave
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.der import score
from bench.speakers import _hypothesis, _segments, spoken

CACHE = Path.home() / ".cache" / "recall" / "speakers-calibration"
CALIBRATION = 100  # seed offset of the calibration files
FILES = 6
VOICES = (1, 2, 3, 4)
CLOSE = ("en+f1", "en+f2")  # the nearest two voices of `recall_dev.dialogue.VOICES`
CLOSE_SEEDS = 200  # seed offset of the files that hold both
CLOSE_FILES = 4


@dataclass
class Case:
    voices: int
    seed: int
    reference: list[tuple[str, float, float]]
    segments: list[Any]  # with words
    windows: list[Any]  # from the words
    vectors: np.ndarray[Any, Any]
    bare_windows: list[Any]  # from the segments' spans alone
    bare_vectors: np.ndarray[Any, Any]


def _embed(encoder: Any, path: Path, segments: list[Any]) -> tuple[list[Any], Any]:
    from recall.media import MediaOptions, load_media
    from recall.speakers.label import Embedder, spans_of, windows_of

    windows = windows_of(spans_of(segments))
    embedder = Embedder(encoder, windows)
    with load_media(path.as_uri(), MediaOptions()) as media:
        for chunk in media.chunks(None):
            embedder.add(chunk.first, chunk.audio)
    return windows, embedder.finish()


def close(n: int, out: Path, seed: int) -> Any:
    """A dialogue of `n` voices (as `spoken` makes them) of which two are `CLOSE`, the others
    drawn by `seed`, in an order drawn by `seed`."""
    from recall_dev import dialogue

    pick = random.Random(seed)
    pair = [v for v in dialogue.VOICES if v.name in CLOSE]
    others = pick.sample([v for v in dialogue.VOICES if v.name not in CLOSE], n - 2)
    voices = [*pair, *others]
    pick.shuffle(voices)
    return dialogue.make(out, speakers=n, turns=4 * n, seed=seed, overlap=0.2,
                         voices=tuple(voices))  # fmt: skip


def _files(files: int) -> Iterator[tuple[int, int, Callable[[int, Path, int], Any]]]:
    """(voices, seed, maker) of every file of the calibration set."""
    for n, k in itertools.product(VOICES, range(files)):
        yield n, CALIBRATION + 1000 * n + k, spoken
    for n, k in itertools.product(VOICES[1:], range(CLOSE_FILES)):
        yield n, CLOSE_SEEDS + 1000 * n + k, close


def make(files: int) -> None:
    """Transcribe and embed the calibration set into `CACHE` (files already there are kept)."""
    from recall.engines.whisper import available_cpus, bundled_path, load_model
    from recall.speakers import VoiceEncoder

    CACHE.mkdir(parents=True, exist_ok=True)
    model = load_model(str(bundled_path()), available_cpus())
    encoder = VoiceEncoder.packaged()
    for n, seed, maker in _files(files):
        target = CACHE / f"v{n}-{seed}.json"
        if target.exists():
            continue
        d = maker(n, CACHE / "audio.wav", seed)
        segments = _segments(d.path, model)
        windows, vectors = _embed(encoder, d.path, segments)
        bare = [s.model_copy(update={"words": None}) for s in segments]
        bare_windows, bare_vectors = _embed(encoder, d.path, bare)
        target.write_text(json.dumps({
            "voices": n, "seed": seed,
            "reference": [(str(t.speaker), t.start, t.end) for t in d.turns],
            "segments": [s.model_dump(mode="json") for s in segments],
            "windows": [(w.first, w.end) for w in windows],
            "vectors": vectors.tolist(),
            "bare_windows": [(w.first, w.end) for w in bare_windows],
            "bare_vectors": bare_vectors.tolist(),
        }))  # fmt: skip
        print(f"[calibrate] {target.name}: {len(windows)} windows", file=sys.stderr, flush=True)
    if not (CACHE / "v1-long.json").exists():
        _long(encoder)


def _long(encoder: Any) -> None:
    """The memory bench's one voice (`bench.longfile`: espeak-ng's default voice, sentences
    0.6 s apart), labelled as the simulated engine's segments give it: segments that cover
    the whole audio, pauses included, and no words."""
    from recall.media.types import Segment
    from recall_dev import speech

    wav = CACHE / "long.wav"
    speech.speak_for(110.0, wav, words_per_minute=150)
    with wave.open(str(wav)) as w:
        seconds = w.getnframes() / w.getframerate()
    segments = [Segment(start=a, end=min(a + 6.0, seconds), text="w")
                for a in np.arange(0.0, seconds, 6.0).tolist()]  # fmt: skip
    windows, vectors = _embed(encoder, wav, segments)
    (CACHE / "v1-long.json").write_text(json.dumps({
        "voices": 1, "seed": -1, "reference": [("0", 0.0, seconds)],
        "segments": [s.model_dump(mode="json") for s in segments],
        "windows": [(w.first, w.end) for w in windows], "vectors": vectors.tolist(),
        "bare_windows": [(w.first, w.end) for w in windows], "bare_vectors": vectors.tolist(),
    }))  # fmt: skip


def cases() -> Iterator[Case]:
    from recall.media.types import Segment
    from recall.speakers.label import Window

    for path in sorted(CACHE.glob("v*.json")):
        d = json.loads(path.read_text())
        yield Case(
            d["voices"], d["seed"], [tuple(r) for r in d["reference"]],
            [Segment.model_validate(s) for s in d["segments"]],
            [Window(*w) for w in d["windows"]], np.array(d["vectors"], np.float32),
            [Window(*w) for w in d["bare_windows"]], np.array(d["bare_vectors"], np.float32),
        )  # fmt: skip


Clusterer = Callable[[np.ndarray[Any, Any]], np.ndarray[Any, Any]]


def evaluate(all_cases: list[Case], clusterer: Clusterer, *, bare: bool = False,
             verbose: bool = False) -> dict[str, Any]:  # fmt: skip
    """The count right and mean DER per voice count, for `clusterer` (vectors -> labels)."""
    from recall.speakers.label import labelled

    out: dict[str, Any] = {}
    for n in VOICES:
        right, ders = [], []
        for c in (c for c in all_cases if c.voices == n):
            windows, vectors = (c.bare_windows, c.bare_vectors) if bare else (c.windows, c.vectors)
            labels = clusterer(vectors)
            segments = c.segments
            if bare:
                segments = [s.model_copy(update={"words": None}) for s in segments]
            found = len(set(labels.tolist()))
            right.append(found == n)
            if not bare and any(s.words for s in segments):
                hyp = _hypothesis(labelled(segments, windows, labels))
                ders.append(score(c.reference, hyp, collar=0.25).rate)
            if verbose:
                print(f"  {n} voices seed {c.seed}: found {found}", file=sys.stderr)
        out[f"{n}_right"] = f"{sum(right)}/{len(right)}"
        if ders:
            out[f"{n}_der"] = round(statistics.mean(ders), 4)
            out[f"{n}_der_max"] = round(max(ders), 4)
    return out


def shipped(vectors: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    from recall.speakers.cluster import Bounds, cluster

    return cluster(vectors, Bounds()).labels


SWEEP = {
    "SAME_VOICE": (0.6, 0.65, 0.75, 0.87, 0.9),
    "SAME_CENTRE": (0.86, 0.88, 0.9, 0.92, 0.94),
    "NEAR_CENTRE": (0.65, 0.7, 0.75, 0.8, 0.85),
    "MIN_RUN": (1.5, 2.0, 2.5, 3.0, 3.5),
}


def sweep(all_cases: list[Case]) -> dict[str, Any]:
    """The count right per voice count with each threshold moved alone (the others as
    shipped): where the shipped value sits on the plateau."""
    from recall.speakers import cluster as module

    out: dict[str, Any] = {}
    for name, values in SWEEP.items():
        shipped_value = getattr(module, name)
        try:
            for value in values:
                setattr(module, name, value)
                scored = evaluate(all_cases, shipped)
                out[f"{name}={value}"] = {k: v for k, v in scored.items() if "right" in k}
        finally:
            setattr(module, name, shipped_value)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["make", "score", "sweep"])
    parser.add_argument("--files", type=int, default=FILES)
    args = parser.parse_args()
    if args.what == "make":
        make(args.files)
        return 0
    all_cases = list(cases())
    if args.what == "sweep":
        print(json.dumps(sweep(all_cases), indent=1))
        return 0
    result = {"words": evaluate(all_cases, shipped, verbose=True),
              "segments": evaluate(all_cases, shipped, bare=True)}  # fmt: skip
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
