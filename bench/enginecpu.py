"""Where the worker's engine path spends its CPU, per second of audio: the model's own calls
against everything around them, stage by stage.

    make bench BENCH_ARGS="--only enginecpu"
    python -m bench.enginecpu --repeat 8 --batch 8

The path is the worker's: the job's media opened by the engine (`load_media`: decode, resample
and cut by the worker's own `Cutter`), then `transcribe_batch` of `batch` chunks a call, words
asked for, in English (speakers, languages and translation off: their models are lines of their
own), on LibriVox read speech (`recall_dev.librivox`) with the bundled tiny.en on this CPU.

Two runs over the same chunks, after a warm-up call:
- *stages*: every stage's function wrapped, its CPU time (`time.process_time`, the whole
  process: CTranslate2's threads are counted in the call that waits for them) counted
  exclusive of the stages it calls. The model is CTranslate2's `encode`, `generate`, `align`
  and `detect_language`; every other stage is CPU outside the model, and what no stage claims
  is *other* (the engine's own Python, the pipeline's glue).
- *profile*: the same path under cProfile with the process's CPU clock, the functions that
  spend the most CPU outside the model by their own time, as evidence for the stages.
- *before*: the same measure of the path before the CPU cuts (`BEFORE`, the commit before
  them), in the same run on the same machine: this script run again, a round at a time, in a
  process whose `recall` is that commit's (a temporary git worktree, removed after), its
  rounds taking turns with the rounds of now (a busy stretch of the shared machine weighs on
  both; each side's quietest round is kept). `--before ''` skips it; outside a git checkout
  that has the commit, the section says so and shows "now" alone.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import json
import os
import pstats
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MODEL_CALLS = ("encode", "generate", "align", "detect_language")
BEFORE = "992b289567106a96c71a741517278f1552eba27e"  # the engine path before the CPU cuts
ROOT = Path(__file__).resolve().parents[1]
_WORDS = "WhisperModel.add_word_timestamps"
_FORWARD = "BatchedInferencePipeline.forward"
# (stage, module, attribute path): the functions whose CPU a stage counts, innermost wins
STAGES: list[tuple[str, str, str]] = [
    ("media: decode and resample", "recall.media.media", "AudioMedia.chunks"),
    ("media: cut", "recall.media.cut", "Cutter._cut"),
    ("media: cut", "recall.media.cut", "Cutter._chunk"),
    ("speech detection (VAD)", "recall.engines.whisper.vad", "speech_timestamps"),
    ("speech detection (VAD)", "recall.engines.whisper.vad", "speech_timestamps_of"),
    ("speech detection (VAD)", "faster_whisper.vad", "get_speech_timestamps"),  # trees before it
    ("features (log-mel)", "faster_whisper.feature_extractor", "FeatureExtractor.__call__"),
    ("windows and batch audio", "recall.engines.whisper.windows", "plan"),
    ("windows and batch audio", "recall.engines.whisper.decode", "decoded"),
    (
        "word alignment (faster-whisper)",
        "faster_whisper.transcribe",
        "WhisperModel.add_word_timestamps",
    ),
    (
        "pipeline per window (tokens, text)",
        "faster_whisper.transcribe",
        "BatchedInferencePipeline.forward",
    ),
    ("segments and words (recall)", "recall.engines.whisper.decode", "window_result"),
    ("segments and words (recall)", "recall.engines.whisper.align", "islands"),
]


@dataclass
class Ledger:
    """CPU seconds per stage, each exclusive of the stages it calls (one thread at a time)."""

    seconds: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    _stack: list[list[float]] = field(default_factory=list)  # [start, children] per open call

    def timed(self, stage: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            frame = [time.process_time(), 0.0]
            self._stack.append(frame)
            try:
                result = fn(*args, **kwargs)
                if stage.startswith("media: decode"):  # a generator: count its steps
                    return self._iterated(stage, result)
                return result
            finally:
                self._close(stage, frame)

        return wrapper

    def _iterated(self, stage: str, iterator: Iterator[Any]) -> Iterator[Any]:
        while True:
            frame = [time.process_time(), 0.0]
            self._stack.append(frame)
            try:
                item = next(iterator)
            except StopIteration:
                return
            finally:
                self._close(stage, frame)
            yield item

    def _close(self, stage: str, frame: list[float]) -> None:
        spent = time.process_time() - frame[0]
        self._stack.pop()
        self.seconds[stage] = self.seconds.get(stage, 0.0) + spent - frame[1]
        self.calls[stage] = self.calls.get(stage, 0) + 1
        if self._stack:
            self._stack[-1][1] += spent


class _TimedModel:
    """CTranslate2's Whisper with its calls counted as the model's."""

    def __init__(self, inner: Any, ledger: Ledger) -> None:
        self._inner, self._ledger = inner, ledger

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._inner, name)
        if name in MODEL_CALLS:
            return self._ledger.timed(f"model: {name}", found)
        return found


@contextlib.contextmanager
def instrumented(ledger: Ledger, model: Any) -> Iterator[None]:
    """Every stage of `STAGES` and the model's calls counted in `ledger` while inside."""
    import importlib

    undo: list[tuple[Any, str, Any]] = []
    for stage, module, path in STAGES:
        try:
            owner: Any = importlib.import_module(module)
        except ModuleNotFoundError:
            if not module.startswith("recall."):
                raise
            # An older tree measured for "before" (`PYTHONPATH=<its operator/>`).
            print(f"enginecpu: {module} is not in this tree; its stage {stage!r} counts nothing")
            continue
        *outer, name = path.split(".")
        for part in outer:
            owner = getattr(owner, part)
        if not hasattr(owner, name) and module.startswith("recall."):
            print(f"enginecpu: {module}.{path} is not in this tree; it counts nothing")
            continue
        original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        undo.append((owner, name, original))
        setattr(owner, name, ledger.timed(stage, original))
    inner = model.model
    model.model = _TimedModel(inner, ledger)
    try:
        yield
    finally:
        model.model = inner
        for owner, name, original in reversed(undo):
            setattr(owner, name, original)


def transcribed(engine: Any, job: Any, batch: int) -> tuple[float, list[str]]:
    """The worker's engine path over `job`'s media: (audio seconds, the segments' text)."""
    from recall.engines.base import TranscribeRequest

    texts: list[str] = []
    cancel = threading.Event()
    with engine.load_media(job) as media:
        group: list[Any] = []
        seconds = 0.0
        for chunk in media.chunks():
            seconds += chunk.duration
            group.append(chunk)
            if len(group) == batch or chunk.last:
                request = TranscribeRequest.of(group, job=job, cancel=cancel, language="en")
                found = engine.transcribe_batch(request)
                texts += [s.text for segments in found for s in segments]
                group = []
    return seconds, texts


def _job(path: Path) -> Any:
    from recall.resources import TranscriptionJob

    spec = {"source": {"url": path.as_uri()}, "language": "en", "transcript": {"words": True}}
    return TranscriptionJob.from_api({"metadata": {"name": "librivox"}, "spec": spec})


def measure_before(ref: str, repeat: int, batch: int, rounds: int) -> dict[str, Any]:
    """`measure` of the path at `ref`, in a process whose `recall` is that commit's: its
    figures with a `label`, or {"error": why} when it cannot be measured here."""
    with before_tree(ref) as run:
        if isinstance(run, dict):
            return run
        return labelled(run(repeat, batch, rounds), ref)


Runner = Callable[[int, int, int], dict[str, Any]]  # (repeat, batch, rounds): the figures


@contextlib.contextmanager
def before_tree(ref: str) -> Iterator[Runner | dict[str, Any]]:
    """A temporary worktree of `ref`, as a function that measures it (repeat, batch, rounds)
    in a process of its own; {"error": why} when there is none. The worktree is removed
    whatever happens, a SIGTERM included."""
    import signal

    git = ["git", "-C", str(ROOT)]
    try:
        found = subprocess.run(
            [*git, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
    except OSError as e:
        yield {"error": f"git cannot run here ({e})"}
        return
    if found.returncode != 0:
        yield {"error": f"{ref} is not in this checkout (a git clone with its history has it)"}
        return
    commit = found.stdout.strip()

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, stop) if main else None
    try:
        with tempfile.TemporaryDirectory(prefix="recall-enginecpu-before-") as tmp:
            tree, out = Path(tmp) / "tree", Path(tmp) / "before.json"
            added = subprocess.run(
                [*git, "worktree", "add", "--detach", "--quiet", str(tree), commit],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            if added.returncode != 0:
                yield {"error": f"git worktree add failed: {added.stderr.strip()[-300:]}"}
                return
            try:
                yield lambda repeat, batch, rounds: _run_before(
                    tree, out, ref, repeat, batch, rounds
                )
            finally:
                subprocess.run([*git, "worktree", "remove", "--force", str(tree)],
                               check=False, capture_output=True)  # fmt: skip
                subprocess.run([*git, "worktree", "prune"], check=False, capture_output=True)
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)


def labelled(figures: dict[str, Any], ref: str) -> dict[str, Any]:
    """The "before" figures named by when and what they measured (an error as it is)."""
    if "error" not in figures:
        when = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
        figures["label"] = f"{when}, the path before the cuts, {ref[:7]}"
        figures.pop("profile", None)
    return figures


def _run_before(
    tree: Path, out: Path, ref: str, repeat: int, batch: int, rounds: int
) -> dict[str, Any]:
    path = os.pathsep.join([str(tree / "operator"), str(ROOT / "dev"), str(ROOT)])
    run = subprocess.run(
        [sys.executable, "-m", "bench.enginecpu", "--before", "", "--out", str(out),
         "--repeat", str(repeat), "--batch", str(batch), "--rounds", str(rounds)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": path},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if run.returncode != 0:
        return {"error": f"the run at {ref} failed: {run.stderr.strip()[-400:]}"}
    figures: dict[str, Any] = json.loads(out.read_text())
    return figures


def measure(
    repeat: int = 8, batch: int = 8, top: int = 12, rounds: int = 3, before: str = BEFORE
) -> dict[str, Any]:
    """The figures of the module docstring."""
    from recall.engines.whisper import WhisperEngine
    from recall.engines.whisper.model import load_model
    from recall_dev import librivox

    with tempfile.TemporaryDirectory(prefix="recall-enginecpu-") as tmp:
        path = Path(tmp) / "librivox.wav"
        librivox.recording(path, repeat=repeat)
        job = _job(path)
        engine = WhisperEngine(batch_size=batch)
        local = engine.local_model(job)
        model = load_model(str(local.path), engine.threads, engine.placement, engine.streams)
        transcribed(engine, _job(path), batch)  # warm: the model, the VAD, the caches
        runs = []
        befores: list[dict[str, Any]] = []
        trees: contextlib.AbstractContextManager[Runner | dict[str, Any]] = (
            before_tree(before) if before else contextlib.nullcontext({})
        )
        with trees as run_before:
            # The quietest round of each (the machine is shared), the two taking turns so
            # that a busy stretch of the machine weighs on both.
            for _ in range(rounds):
                ledger = Ledger()
                wall, cpu = time.perf_counter(), time.process_time()
                with instrumented(ledger, model):
                    seconds, texts = transcribed(engine, job, batch)
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                inside = sum(v for k, v in ledger.seconds.items() if k.startswith("model: "))
                runs.append((cpu - inside, ledger, wall, cpu))
                if callable(run_before):
                    befores.append(run_before(repeat, batch, 1))
        _outside, ledger, wall, cpu = min(runs, key=lambda r: r[0])
        profile = cProfile.Profile(time.process_time)
        profile.runcall(transcribed, engine, job, batch)
    figures = _figures(ledger, profile, seconds, cpu, wall, engine, batch, texts, top)
    figures["rounds"] = rounds
    if before:
        if isinstance(run_before, dict) and run_before:
            figures["before"] = run_before
        else:
            measured = [b for b in befores if "error" not in b]
            quietest = min(measured, key=lambda b: float(b["outside_ms_per_audio_s"]), default=None)
            figures["before"] = labelled(quietest or befores[-1], before)
    return figures


def _figures(
    ledger: Ledger,
    profile: cProfile.Profile,
    seconds: float,
    cpu: float,
    wall: float,
    engine: Any,
    batch: int,
    texts: list[str],
    top: int,
) -> dict[str, Any]:
    model = sum(v for k, v in ledger.seconds.items() if k.startswith("model: "))
    stages = {k: v for k, v in ledger.seconds.items() if not k.startswith("model: ")}
    stages["other (engine and pipeline Python)"] = cpu - model - sum(stages.values())
    per = 1000.0 / seconds  # CPU ms per audio s
    return {
        "audio_seconds": round(seconds, 1),
        "batch": batch,
        "threads": engine.threads,
        "device": f"{engine.placement.device}/{engine.placement.compute_type}",
        "wall_seconds": round(wall, 2),
        "cpu_ms_per_audio_s": round(cpu * per, 2),
        "model_ms_per_audio_s": round(model * per, 2),
        "outside_ms_per_audio_s": round((cpu - model) * per, 2),
        "model": {
            k.removeprefix("model: "): round(v * per, 3)
            for k, v in sorted(ledger.seconds.items())
            if k.startswith("model: ")
        },
        "stages": {k: round(v * per, 3) for k, v in sorted(stages.items(), key=lambda kv: -kv[1])},
        "profile": _profile_top(profile, seconds, top),
        "words": sum(len(t.split()) for t in texts),
    }


def _profile_top(profile: cProfile.Profile, seconds: float, top: int) -> list[list[Any]]:
    """The functions with the most CPU of their own outside the model: [name, ms per audio s,
    calls]."""
    stats = pstats.Stats(profile)
    rows = []
    for (file, line, name), (_cc, calls, own, _cum, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if name.startswith("<built-in method ctranslate2._ext."):
            continue  # the model's own calls
        where = f"{Path(file).name}:{line} {name}" if file != "~" else name
        rows.append([where, round(own * 1000.0 / seconds, 3), calls])
    rows.sort(key=lambda r: -r[1])
    return rows[:top]


def markdown(section: dict[str, Any]) -> list[str]:
    """The enginecpu section of docs/benchmarks.md; with `before` (the same figures of an
    earlier version of the path, and its `label`), both side by side."""
    from bench.report import _table

    before = section.get("before") or {}
    missing = before.get("error")
    if missing:
        before = {}
    lines = [
        "## The engine's CPU outside the model",
        "",
        f"The worker's engine path (open, decode and cut the media, `transcribe_batch` of "
        f"{section['batch']} chunks a call, words asked for) over {section['audio_seconds']} s "
        f"of LibriVox read speech, bundled tiny.en on {section['device']} with "
        f"{section['threads']} threads: CPU milliseconds per audio second, each stage exclusive "
        f"of those it calls, the quietest of {section.get('rounds', 2)} rounds "
        "(`bench/enginecpu.py`).",
        "",
    ]
    rows = [
        ["all", section["cpu_ms_per_audio_s"]],
        ["the model (CTranslate2's encode, generate, align)", section["model_ms_per_audio_s"]],
        ["**outside the model**", section["outside_ms_per_audio_s"]],
        *([f"- {k}", v] for k, v in section["stages"].items()),
    ]
    headers = ["", "CPU ms per audio s"]
    if before:
        old = {
            "all": before["cpu_ms_per_audio_s"],
            "the model (CTranslate2's encode, generate, align)": before["model_ms_per_audio_s"],
            "**outside the model**": before["outside_ms_per_audio_s"],
            **{f"- {k}": v for k, v in before["stages"].items()},
        }
        rows = [[name, old.get(name, "—"), value] for name, value in rows]
        headers = ["", f"before ({before.get('label', 'earlier')})", "now"]
    lines += _table(headers, rows)
    if before:
        ratio = before["outside_ms_per_audio_s"] / max(section["outside_ms_per_audio_s"], 1e-9)
        first, most = next(iter(section["stages"].items()))
        lines += [
            f"Outside the model: {ratio:.2f} times less CPU than before, measured in the same "
            f"run on the same machine; the most of what is left: {first} ({most} ms).",
            "",
        ]
    elif missing:
        lines += [f'No "before" figures in this run: {missing}.', ""]
    lines += [
        "cProfile (the process's CPU clock): the functions with the most CPU of their own "
        "outside the model, now.",
        "",
    ]
    lines += _table(["function", "CPU ms per audio s", "calls"], section["profile"])
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=8, help="the LibriVox clips, times over")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    parser.add_argument("--before", default=BEFORE, help="the commit to compare with ('' none)")
    args = parser.parse_args()

    result = measure(args.repeat, args.batch, rounds=args.rounds, before=args.before)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    for line in markdown(result):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
