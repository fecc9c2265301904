"""Transcripts side by side with the bare engine, word timing error, subtitle rules, vocabulary.

    .venv/bin/python -m bench.transcripts               # ~3 minutes of LibriVox, ~5 min on 2 cores
    .venv/bin/python -m bench.run --only transcripts    # the same, into docs/benchmarks.md

`measure()` returns a flat dict (`make bench` calls it):

- `bare_*` / `bare_batched_*` / `recall_30s_*` / `recall_300s_*`: the same real recording
  (Debian's LibriVox clips of Sense and Sensibility, `recall_dev.librivox`, `repeat` times
  over) with the same model (the bundled tiny.en), threads and options (beam 2, the VAD
  filter, word timestamps, English), four ways: faster-whisper run directly on the whole file
  twice, as a user would (`bare`: `WhisperModel.transcribe`, one-at-a-time decoding that seeks
  back to the last complete segment of each 30 s window; `bare_batched`:
  `BatchedInferencePipeline(model).transcribe(file, batch_size=1)`, each window of speech
  decoded once), and a job through the real `Worker` loop at recall's defaults (chunks of 30 s,
  one chunk a call) and with chunks of 300 s (chunks cut at silences, each stored and
  checkpointed in a results store in memory, the API server the in-memory one, the json,
  aws.json, srt and vtt outputs rendered). Each run is a process of its own with the model
  loaded before the clock starts; the four kinds run `rounds` times, interleaved, and the
  fastest wall and CPU seconds of each count (the machine is shared: other work only adds).
  `windows` counts the model's encoder passes (one per 30 s window); `*_vs_bare` and
  `*_vs_bare_batched` are recall's wall and CPU time against each bare run (0.05: 5 % more);
  `words_same` is 1 minus the word error rate between recall's and the bare transcript (1.0:
  the same words), `words_same_batched` the same against the bare pipeline's, `*_wer` each
  against the LibriVox transcription.
- `timing_*`: word start errors on speech synthesized word by word with known silences
  (`recall_dev.timed_speech`, four passages), as the engine returns them.
- `cues_*`: SRT cues of the recall run checked against the rules (42 characters a line, 2 lines,
  7 s, the gap) after re-parsing with pysubs2; `segment_cues_*`: the same check on one cue per
  Whisper segment, how cues were cut before.
- `names_*`: the error rate on six invented names without and with them as the vocabulary.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from recall.engines.base import TranscribeRequest

ROOT = Path(__file__).resolve().parents[1]
OPTIONS: dict[str, Any] = {
    "beam_size": 2,
    "vad_filter": True,
    "condition_on_previous_text": False,
    "word_timestamps": True,
    "language": "en",
}


# --- the runs, each in its own process -------------------------------------------------------


class Windows:
    """Counts the model's encoder passes, one per 30 s window (a batch of N counts N), by
    wrapping `WhisperModel.encode` in this process."""

    def __init__(self) -> None:
        from faster_whisper import WhisperModel

        self.count = 0
        encode = WhisperModel.encode

        def counted(model: Any, features: Any) -> Any:
            self.count += 1 if features.ndim == 2 else int(features.shape[0])
            return encode(model, features)

        setattr(WhisperModel, "encode", counted)  # noqa: B010 (a method patched for the count)


def bare(path: str, chunk_seconds: int) -> dict[str, Any]:
    """faster-whisper on the whole file, as a user would run it: `WhisperModel.transcribe`."""
    return run_bare(path, batched=False)


def bare_batched(path: str, chunk_seconds: int) -> dict[str, Any]:
    """faster-whisper's batched pipeline on the whole file, one window a step."""
    return run_bare(path, batched=True)


def run_bare(path: str, *, batched: bool) -> dict[str, Any]:
    from faster_whisper import BatchedInferencePipeline

    from recall.engines.whisper import available_cpus, bundled_path, load_model

    model = load_model(str(bundled_path()), available_cpus())
    windows = Windows()
    wall, cpu = time.perf_counter(), time.process_time()
    if batched:
        segments, _info = BatchedInferencePipeline(model).transcribe(path, batch_size=1, **OPTIONS)
    else:
        segments, _info = model.transcribe(path, **OPTIONS)
    texts = [s.text.strip() for s in segments]
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {
        "text": " ".join(t for t in texts if t),
        "wall": wall,
        "cpu": cpu,
        "windows": windows.count,
    }


def through_recall(path: str, chunk_seconds: int) -> dict[str, Any]:
    """A job through the real worker loop (see the module docstring)."""
    from structlog.testing import capture_logs

    from recall.base.settings import StoreSettings, WorkerSettings
    from recall.bucket import Stores
    from recall.engines.whisper import WhisperEngine, available_cpus, bundled_path, load_model
    from recall.media import MediaOptions
    from recall.transcripts import load_transcript
    from recall.worker.loop import Worker
    from recall_dev.twin.api import MemoryApi

    engine = WhisperEngine(threads=available_cpus(), media=MediaOptions())
    load_model(str(bundled_path()), engine.threads)  # before the clock starts
    windows = Windows()
    store = MemoryApi(watch_seconds=1.0)
    settings = WorkerSettings(
        id="bench", engine="whisper", idle_exit_seconds=0.5, max_jobs=1, dispatch="queue"
    )
    results = Stores(StoreSettings(url="memory://bench")).results()
    worker = Worker(store, settings, engine, namespace="default", results=results)
    store.create_job(
        "default",
        {
            "apiVersion": "recall.dev/v1alpha1",
            "kind": "TranscriptionJob",
            "metadata": {"name": "librivox"},
            "spec": {
                "source": {"url": Path(path).as_uri()},
                "language": "en",
                "leaseDurationSeconds": 300,
                "engine": {"name": "whisper", "chunkSeconds": chunk_seconds},
                "transcript": {"words": True},
                "output": {
                    "url": "file:///out/{key}",
                    "formats": ["json", "aws.json", "srt", "vtt"],
                },
            },
        },
    )
    wall, cpu = time.perf_counter(), time.process_time()
    with capture_logs():
        worker.run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    job = store.get_job("default", "librivox")
    assert job is not None and job.status.result is not None, store.dump()
    transcript = load_transcript(results, job.status.result.transcript)
    assert transcript is not None
    directory = job.status.result.transcript.rsplit("/", 1)[0]
    srt = results.get(f"{directory}/out.srt") or b""
    store.close()
    return {
        "text": transcript.text,
        "wall": wall,
        "cpu": cpu,
        "srt": srt.decode(),
        "segments": [[s.start, s.end, s.text] for s in transcript.segments],
        "chunks": job.status.progress.chunks_done if job.status.progress else None,
        "windows": windows.count,
    }


def run_child(kind: str, path: str, chunk_seconds: int = 30) -> dict[str, Any]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "bench.transcripts", "--child", kind, path, str(chunk_seconds)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the {kind} run failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def one_more(kind: str, path: str, chunk_seconds: int, runs: list[dict[str, Any]]) -> None:
    """One more run of `kind`, kept with the others: the fastest tells the cost (the machine
    is shared, and other work only ever adds time)."""
    runs.append(run_child(kind, path, chunk_seconds))


# --- the figures ----------------------------------------------------------------------------


def side_by_side(repeat: int, workdir: Path, rounds: int = 3) -> dict[str, Any]:
    import jiwer

    from bench.cues import check, parse
    from recall.media.types import Segment
    from recall.transcripts.subtitles import Cue, Rules
    from recall_dev import librivox, speech

    path = workdir / "librivox.wav"
    seconds, said = librivox.recording(path, repeat=repeat)
    kinds = [("bare", 0), ("bare_batched", 0), ("recall", 30), ("recall", 300)]
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {k: [] for k in kinds}
    for _ in range(rounds):  # interleaved, so a busy spell of the machine hits all of them
        for kind, chunk in kinds:
            one_more(kind, str(path), chunk, runs[(kind, chunk)])
    norm = speech.normalise
    out: dict[str, Any] = {"audio_seconds": round(seconds, 1), "rounds": rounds}
    texts = {}
    for kind in ("bare", "bare_batched"):
        mine = runs[(kind, 0)]
        texts[kind] = mine[0]["text"]
        out[f"{kind}_windows"] = mine[0]["windows"]
        out[f"{kind}_wall_seconds"] = round(min(x["wall"] for x in mine), 2)
        out[f"{kind}_cpu_seconds"] = round(min(x["cpu"] for x in mine), 2)
        out[f"{kind}_wer"] = round(jiwer.wer(norm(said), norm(texts[kind])), 3)
    out["bare_batched_words_same"] = round(
        1 - jiwer.wer(norm(texts["bare"]), norm(texts["bare_batched"])), 4
    )
    for chunk in (30, 300):
        mine = runs[("recall", chunk)]
        r = mine[0]
        tag = f"recall_{chunk}s"
        wall = min(x["wall"] for x in mine)
        cpu = min(x["cpu"] for x in mine)
        out[f"{tag}_chunks"] = r["chunks"]
        out[f"{tag}_windows"] = r["windows"]
        out[f"{tag}_wall_seconds"] = round(wall, 2)
        out[f"{tag}_cpu_seconds"] = round(cpu, 2)
        for kind in ("bare", "bare_batched"):
            out[f"{tag}_wall_vs_{kind}"] = round(wall / out[f"{kind}_wall_seconds"] - 1, 3)
            out[f"{tag}_cpu_vs_{kind}"] = round(cpu / out[f"{kind}_cpu_seconds"] - 1, 3)
        out[f"{tag}_words_same"] = round(1 - jiwer.wer(norm(texts["bare"]), norm(r["text"])), 4)
        out[f"{tag}_words_same_batched"] = round(
            1 - jiwer.wer(norm(texts["bare_batched"]), norm(r["text"])), 4
        )
        out[f"{tag}_wer"] = round(jiwer.wer(norm(said), norm(r["text"])), 3)
    r = runs[("recall", 30)][0]
    rules = Rules()
    cues = parse(r["srt"], "srt")
    broken = {i for p in check(cues, rules) for i in [p.split(":")[0]]}
    out["cues"] = len(cues)
    out["cues_breaking_rules"] = len(broken)
    segments = [Segment(start=s, end=e, text=t) for s, e, t in r["segments"]]
    per_segment = [Cue(s.start, s.end, (s.text.strip(),)) for s in segments if s.text.strip()]
    broken = {i for p in check(per_segment, rules) for i in [p.split(":")[0]]}
    out["segment_cues"] = len(per_segment)
    out["segment_cues_breaking_rules"] = len(broken)
    out["segment_cues_longest_line"] = max((len(c.lines[0]) for c in per_segment), default=0)
    out["segment_cues_longest_seconds"] = round(
        max((c.end - c.start for c in per_segment), default=0.0), 2
    )
    return out


def word_timing(workdir: Path) -> dict[str, Any]:
    import statistics

    from recall.engines.whisper import WhisperEngine
    from recall_dev import timed_speech

    engine = WhisperEngine()
    errors: list[float] = []
    spoken = 0
    for seed in range(4):
        words, gaps = timed_speech.passage(seed=seed)
        path = workdir / f"words-{seed}.wav"
        truth = timed_speech.speak(words, path, gaps=gaps)
        segments = timed_speech.transcribed_with_a_resume(engine, path)
        errors += timed_speech.errors_of(truth, segments)
        spoken += len(truth)
    absolute = sorted(abs(e) for e in errors)
    return {
        "timing_words": spoken,
        "timing_words_matched": len(errors),
        "timing_within_0_25_s": round(sum(e <= 0.25 for e in absolute) / len(absolute), 3),
        "timing_within_0_1_s": round(sum(e <= 0.1 for e in absolute) / len(absolute), 3),
        "timing_median_abs_seconds": round(statistics.median(absolute), 3),
        "timing_p90_abs_seconds": round(absolute[int(0.9 * (len(absolute) - 1))], 3),
    }


def vocabulary(workdir: Path) -> dict[str, Any]:
    import threading

    from recall.engines.whisper import WhisperEngine
    from recall.resources import TranscriptionJob
    from recall_dev import speech, timed_speech

    wav = workdir / "names.wav"
    speech.synthesize(timed_speech.NAME_SENTENCES, wav)
    engine = WhisperEngine()
    out = {}
    for name, words in (("without", None), ("with", timed_speech.NAMES)):
        spec: dict[str, Any] = {"source": {"url": wav.as_uri()}, "language": "en"}
        if words:
            spec["vocabulary"] = words
        job = TranscriptionJob.from_api({"metadata": {"name": "names"}, "spec": spec})
        text = []
        with engine.load_media(job) as media:
            for chunk in media.chunks():
                found = engine.transcribe(
                    TranscribeRequest.of(
                        chunk, language="en", cancel=threading.Event(), job=job, attempt=1
                    )
                )
                text += [s.text for s in found]
        rate = timed_speech.name_errors(" ".join(text))
        out[f"names_error_{name}_vocabulary"] = round(rate, 3)
    return out


def measure(repeat: int = 6) -> dict[str, Any]:
    """Every figure of the module docstring, as one flat dict."""
    with tempfile.TemporaryDirectory(prefix="recall-transcripts-") as tmp:
        workdir = Path(tmp)
        out = side_by_side(repeat, workdir)
        out |= word_timing(workdir)
        out |= vocabulary(workdir)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=6, help="the LibriVox clips, times over")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, path, chunk = args.child
        with contextlib.redirect_stdout(sys.stderr):  # logs are not the result
            run = {"bare": bare, "bare_batched": bare_batched}.get(kind, through_recall)
            result = run(path, int(chunk))
        print(json.dumps(result))
        return 0
    result = measure(args.repeat)
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())


# --- the report -----------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:+.1f} %"


def markdown(section: dict[str, Any]) -> list[str]:
    """The transcripts section of docs/benchmarks.md."""
    s = section
    lines = [
        "## Transcripts side by side with faster-whisper",
        "",
        f"The same real recording ({s['audio_seconds']} s of LibriVox read speech), the same model "
        "(bundled tiny.en), threads and options (beam 2, the VAD filter, word timestamps, "
        "English): faster-whisper run directly on the whole file two ways, and a job through "
        "the real worker loop at 30 s chunks (the default) and 300 s chunks. Fastest of "
        f"{s['rounds']} interleaved rounds; CPU seconds are the process's; the percentages are "
        "against `WhisperModel.transcribe`, then against the batched pipeline.",
        "",
        "| run | decoding windows | wall s | CPU s | WER | same words as `transcribe` |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| faster-whisper `WhisperModel.transcribe` | {s['bare_windows']} | "
        f"{s['bare_wall_seconds']} | {s['bare_cpu_seconds']} | {s['bare_wer']} | — |",
        f"| faster-whisper `BatchedInferencePipeline`, batch 1 | {s['bare_batched_windows']} | "
        f"{s['bare_batched_wall_seconds']} | {s['bare_batched_cpu_seconds']} | "
        f"{s['bare_batched_wer']} | {s['bare_batched_words_same']} |",
    ]
    for chunk in (30, 300):
        k = f"recall_{chunk}s"
        lines.append(
            f"| recall, {chunk} s chunks ({s[k + '_chunks']}) | {s[k + '_windows']} | "
            f"{s[k + '_wall_seconds']} ({_pct(s[k + '_wall_vs_bare'])}, "
            f"{_pct(s.get(k + '_wall_vs_bare_batched'))}) | {s[k + '_cpu_seconds']} "
            f"({_pct(s[k + '_cpu_vs_bare'])}, {_pct(s.get(k + '_cpu_vs_bare_batched'))}) | "
            f"{s[k + '_wer']} | {s[k + '_words_same']} |"
        )
    lines += [
        "",
        "| check | figure |",
        "| --- | --- |",
        f"| SRT cues of recall's run breaking the rules (42 characters a line, 2 lines, 7 s, the "
        f"gap) | {s['cues_breaking_rules']} of {s['cues']} |",
        f"| the same rules, one cue per Whisper segment (how cues were cut before) | "
        f"{s['segment_cues_breaking_rules']} of {s['segment_cues']} (longest line "
        f"{s['segment_cues_longest_line']} characters, longest cue "
        f"{s['segment_cues_longest_seconds']} s) |",
        f"| word start error on synthesized words with known silences: within 0.25 s, 0.1 s | "
        f"{100 * s['timing_within_0_25_s']:.1f} %, {100 * s['timing_within_0_1_s']:.1f} % of "
        f"{s['timing_words_matched']} matched words ({s['timing_words']} said); median "
        f"{s['timing_median_abs_seconds']} s, p90 {s['timing_p90_abs_seconds']} s |",
        f"| error rate on six invented names, without and with them as the vocabulary | "
        f"{100 * s['names_error_without_vocabulary']:.0f} %, "
        f"{100 * s['names_error_with_vocabulary']:.0f} % |",
        "",
    ]
    return lines
