"""Speaker labels measured: DER and the count found on espeak-ng speech of 1 to 4 voices,
the labelling's CPU against the transcription's, overlapping speech, and a worker's
memory on long recordings.

    .venv/bin/python -m bench.speakers --quick          # ~10 minutes on 2 cores
    .venv/bin/python -m bench.run --only speakers       # the same, into docs/benchmarks.md

`measure(quick)` returns a flat dict (`make bench` calls it):

- `der_<n>_*` for n = 1, 2, 3, 4 voices: `files` dialogues each (`recall_dev.dialogue`: six
  espeak-ng voices that differ in variant, pitch and speed, turns of 1 to 20 s drawn at random,
  gaps of 0.2-0.8 s, one turn in five starting 0.5-1.5 s before the previous one ends; one
  voice: six turns of one of them), seeds `1000 n + k` (the thresholds were calibrated on
  others: `bench.speakers_calibrate`),
  transcribed by faster-whisper with the bundled tiny.en and recall's options (beam 2, the
  VAD filter, word timestamps), then labelled from those words and the audio decoded again
  by `recall.media`, as the worker does (`{}`: the count found from the audio). DER with a
  0.25 s collar, overlapping speech scored (`bench.der`): the mean over the files of the
  missed, false-alarm and confusion shares; `count_right` the share of files whose count of
  voices found is the true one; `cpu_share` the labelling's CPU seconds (decode, features,
  model, clustering) over the transcription's.
- `overlap_*`: the share of the reference speech where two voices sound at once, and the
  share of it labelled with one of the two voices (the dominant voice: each window is
  labelled with the voice nearest its vector, the louder one).
- `memory_<h>h_*` for h = 0.5, 1, 2: a worker process (the real `Worker` loop, the simulated
  engine on the real audio path, an in-memory store) transcribing and labelling an `h`-hour
  MP3 of espeak-ng speech (`bench.longfile.make_source`): its peak RSS (VmHWM), the
  labelling's seconds and the voices found.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.der import score
from bench.transcripts import OPTIONS

ROOT = Path(__file__).resolve().parents[1]
SPEAKERS = (1, 2, 3, 4)


def monologue(out: Path, *, seed: int, turns: int) -> Any:
    """A dialogue whose every turn is one voice (drawn by `seed`): a one-voice file with the
    dialogues' turn lengths and gaps, its turns all speaker 0."""
    import dataclasses
    import random

    from recall_dev import dialogue

    voice = random.Random(seed).choice(dialogue.VOICES)
    d = dialogue.make(out, speakers=2, turns=turns, seed=seed, voices=(voice, voice))
    one = tuple(dataclasses.replace(t, speaker=0) for t in d.turns)
    return dataclasses.replace(d, voices=(voice,), turns=one)


def spoken(n: int, out: Path, seed: int) -> Any:
    """The file of `n` voices for `seed` (one voice: a monologue of 6 turns; else a dialogue of
    4 n turns, one in five overlapping the one before)."""
    from recall_dev import dialogue

    if n == 1:
        return monologue(out, seed=seed, turns=6)
    return dialogue.make(out, speakers=n, turns=4 * n, seed=seed, overlap=0.2)


def _segments(path: Path, model: Any) -> list[Any]:
    from recall.media.types import Segment, Word

    found, _ = model.transcribe(str(path), **OPTIONS)
    out = []
    for s in found:
        words = [Word(start=w.start, end=w.end, text=w.word, probability=w.probability)
                 for w in s.words or []]  # fmt: skip
        out.append(Segment(start=s.start, end=s.end, text=s.text, words=words))
    return out


def _hypothesis(segments: list[Any]) -> list[tuple[str, float, float]]:
    """Who spoke when, from the labelled words: a speaker's words closer than 0.5 s joined."""
    out: list[tuple[str, float, float]] = []
    words = sorted((w for s in segments for w in s.words or []), key=lambda w: w.start)
    for w in words:
        if out and out[-1][0] == w.speaker and w.start - out[-1][2] < 0.5:
            out[-1] = (out[-1][0], out[-1][1], max(out[-1][2], w.end))
        else:
            out.append((str(w.speaker), w.start, w.end))
    return out


def _overlap(reference: list[tuple[str, float, float]], hypothesis: list[tuple[str, float, float]],
             mapping: dict[str, str]) -> tuple[float, float]:  # fmt: skip
    """Seconds where two reference voices sound at once, and of those, labelled with one."""
    step = 0.01
    end = max(e for _, _, e in [*reference, *hypothesis])
    frames = round(end / step) + 1
    refs: dict[str, np.ndarray] = {}
    for who, s, e in reference:
        refs.setdefault(who, np.zeros(frames, bool))[round(s / step) : round(e / step)] = True
    both = np.sum(list(refs.values()), axis=0) >= 2
    labelled = np.zeros(frames, bool)
    for who, s, e in hypothesis:
        ref = mapping.get(who)
        if ref is not None:
            labelled[round(s / step) : round(e / step)] |= refs[ref][
                round(s / step) : round(e / step)
            ]
    return float(both.sum()) * step, float((both & labelled).sum()) * step


def _mapping(reference: list[tuple[str, float, float]],
             hypothesis: list[tuple[str, float, float]]) -> dict[str, str]:  # fmt: skip
    """Each hypothesis speaker to the reference speaker it shares most time with."""
    shared: dict[tuple[str, str], float] = {}
    for h, hs, he in hypothesis:
        for r, rs, re in reference:
            t = min(he, re) - max(hs, rs)
            if t > 0:
                shared[(h, r)] = shared.get((h, r), 0.0) + t
    out: dict[str, str] = {}
    for (h, r), _ in sorted(shared.items(), key=lambda kv: -kv[1]):
        if h not in out and r not in out.values():
            out[h] = r
    return out


def der_runs(files: int) -> dict[str, Any]:
    """The `der_*` and `overlap_*` figures (see the module docstring)."""
    from recall.engines.whisper import available_cpus, bundled_path, load_model
    from recall.media import MediaOptions, load_media
    from recall.speakers import Bounds, VoiceEncoder, label_voices

    model = load_model(str(bundled_path()), available_cpus())
    encoder = VoiceEncoder.packaged()
    out: dict[str, Any] = {"files": files}
    overlap_total = overlap_labelled = speech_total = 0.0
    with tempfile.TemporaryDirectory(prefix="recall-speakers-") as tmp:
        for n in SPEAKERS:
            ders, missed, fa, conf, right, shares, found_counts = [], [], [], [], [], [], []
            for k in range(files):
                d = spoken(n, Path(tmp) / f"d{n}-{k}.wav", 1000 * n + k)
                cpu = time.process_time()
                segments = _segments(d.path, model)
                transcribe_cpu = time.process_time() - cpu
                cpu = time.process_time()
                media = load_media(d.path.as_uri(), MediaOptions())
                with media:
                    blocks = ((c.first, c.audio) for c in media.chunks(None))
                    labelling = label_voices(encoder, segments, blocks, Bounds())
                label_cpu = time.process_time() - cpu
                reference = [(str(t.speaker), t.start, t.end) for t in d.turns]
                hypothesis = _hypothesis(labelling.segments)
                der = score(reference, hypothesis, collar=0.25)
                ders.append(der.rate)
                missed.append(der.missed)
                fa.append(der.false_alarm)
                conf.append(der.confusion)
                right.append(labelling.found.count == n)
                found_counts.append(labelling.found.count)
                shares.append(label_cpu / transcribe_cpu)
                both, named = _overlap(reference, hypothesis, _mapping(reference, hypothesis))
                overlap_total += both
                overlap_labelled += named
                speech_total += sum(t.end - t.start for t in d.turns)
                print(f"[speakers] {n} voices, file {k}: DER {der.rate:.3f}, found "
                      f"{labelling.found.count}, cpu share {label_cpu / transcribe_cpu:.3f}",
                      file=sys.stderr, flush=True)  # fmt: skip
            out |= {
                f"der_{n}_mean": round(statistics.mean(ders), 4),
                f"der_{n}_max": round(max(ders), 4),
                f"der_{n}_missed": round(statistics.mean(missed), 4),
                f"der_{n}_false_alarm": round(statistics.mean(fa), 4),
                f"der_{n}_confusion": round(statistics.mean(conf), 4),
                f"der_{n}_count_right": round(sum(right) / len(right), 3),
                f"der_{n}_counts_found": found_counts,
                f"der_{n}_cpu_share": round(statistics.mean(shares), 4),
            }
    out["overlap_share"] = round(overlap_total / speech_total, 4) if speech_total else 0.0
    out["overlap_labelled_one_of_two"] = (
        round(overlap_labelled / overlap_total, 3) if overlap_total else None
    )
    right_all = [out[f"der_{n}_count_right"] for n in SPEAKERS]
    out["count_right"] = round(statistics.mean(right_all), 3)
    out["cpu_share"] = round(statistics.mean(out[f"der_{n}_cpu_share"] for n in SPEAKERS), 4)
    return out


# --- memory: a worker process per length ----------------------------------------------------


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One job through the real worker loop, simulated engine on the real audio, labelled."""
    from structlog.testing import capture_logs

    from bench.longfile import rss_mb
    from recall.base.settings import StoreSettings, WorkerSettings
    from recall.bucket import Stores
    from recall.engines.simulated import SimulatedEngine
    from recall.media import MediaOptions
    from recall.speakers import VoiceEncoder
    from recall.worker.loop import Worker
    from recall_dev.twin.api import MemoryApi

    media = MediaOptions(chunk_seconds=30.0)
    engine = SimulatedEngine(chunk_delay_seconds=0, chunks=1, chunk_seconds=30.0, media=media,
                             words_per_minute=150.0)  # fmt: skip
    VoiceEncoder.packaged()  # the model loaded before the base is read, as in a worker's first job
    store = MemoryApi(watch_seconds=1.0)
    settings = WorkerSettings(id="bench", engine="simulated", idle_exit_seconds=0.5, max_jobs=1,
                              dispatch="queue")  # fmt: skip
    results = Stores(StoreSettings(url="memory://bench")).results()
    worker = Worker(store, settings, engine, namespace="default", results=results)
    store.create_job("default", {
        "apiVersion": "recall.dev/v1alpha1",
        "kind": "TranscriptionJob",
        "metadata": {"name": "long"},
        "spec": {
            "source": {"url": spec["url"]},
            "leaseDurationSeconds": 300,
            "engine": {"name": "simulated", "simulate": {"chunkDelaySeconds": 0}},
            "transcript": {"speakers": {}},
        },
    })  # fmt: skip
    base = rss_mb()
    with capture_logs() as logs:
        worker.run()
    peak = rss_mb("VmHWM")
    store.close()
    job = store.get_job("default", "long")
    assert job is not None and job.status.result is not None, store.dump()
    (labelled,) = [e for e in logs if e.get("event") == "speakers_labelled"]
    return {
        "audio_hours": round((job.status.result.duration_seconds or 0) / 3600, 2),
        "rss_base_mb": round(base, 1),
        "rss_peak_mb": round(peak, 1),
        "label_seconds": labelled["seconds"],
        "label_cpu_seconds": labelled["cpu_seconds"],
        "windows": labelled["windows"],
        "speakers": job.status.result.speakers,
    }


def memory(hours: tuple[float, ...]) -> dict[str, Any]:
    from bench.longfile import make_source

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="recall-speakers-mem-") as tmp:
        for h in hours:
            path, _, _ = make_source(Path(tmp) / f"{h}h.mp3", h * 3600, Path(tmp))
            env = {**os.environ, "RECALL_LOG_FORMAT": "json", "PYTHONUNBUFFERED": "1"}
            spec = json.dumps({"url": path.as_uri()})
            done = subprocess.run(
                [sys.executable, "-m", "bench.speakers", "--child", spec],
                cwd=ROOT, env=env, capture_output=True, text=True, check=False,
            )  # fmt: skip
            if done.returncode != 0:
                raise RuntimeError(f"the worker run failed:\n{done.stderr[-3000:]}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            key = f"memory_{h:g}h"
            out |= {f"{key}_{k}": v for k, v in result.items()}
            path.unlink()
    return out


def measure(quick: bool = False) -> dict[str, Any]:
    """Every figure of the module docstring, as one flat dict."""
    return {**der_runs(3 if quick else 5), **memory((0.5, 1.0, 2.0))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=["der", "memory"])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    if args.only == "der":
        result = der_runs(3 if args.quick else 5)
    elif args.only == "memory":
        result = memory((0.5, 1.0, 2.0))
    else:
        result = measure(args.quick)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
