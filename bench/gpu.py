"""The Whisper engine on a CUDA device over a grid of worker shapes (slots × batchSize): how fast,
how busy the GPU and the CPUs, how much GPU memory, and the words' error rate per shape.

    make bench BENCH_ARGS="--only gpu"
    python -m bench.gpu --model DIR --clips DIR --repeat 200 --out results.json

Where no CUDA device is visible (CTranslate2 counts none) the section is skipped with one line
that says so, and records why.

Per shape: the real `WhisperEngine` (`device` cuda, its compute type auto: float16), one model
replica per slot (`streams`, as a worker of that many slots loads), its `batch_size` chunks a
call; `slots` threads, each transcribing its own consecutive share of the chunks `batch` at a
time with the text before as context, as a worker's slots do with their jobs. The chunks are
LibriVox read speech (`recall_dev.librivox`, the clips `repeat` times over) cut by the worker's
own `Cutter` ahead of the timing (a worker decodes and cuts ahead of its engine). A warm-up call
per shape loads its replicas. Figures:
- *audio s per wall s*: the audio's seconds over the wall time of the engine calls;
- *GPU busy*: NVML's utilization (the share of time a kernel ran), sampled every 50 ms and
  averaged; *GPU memory*: the most NVML reported used meanwhile (every process's);
- *CPU cores busy*: the process's CPU seconds (all its threads) over the wall time;
- *WER*: the words against the clips' transcription (`recall_dev.speech.normalise`, jiwer).
The recommended shape is the fastest whose WER is within 0.002 of the best shape's.
"""

from __future__ import annotations

import argparse
import functools
import json
import tempfile
import threading
import time
import wave
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# (worker processes, slots each, batchSize): one process is a worker as the chart runs it; more
# are the same slots spread over helper processes (measured: do threads contend?)
GRID = [
    (1, 1, 1),
    (1, 1, 16),
    (1, 4, 16),
    (1, 8, 16),
    (1, 16, 16),
    (1, 16, 32),
    (1, 32, 16),
    (4, 4, 16),
    (8, 2, 16),
    (8, 4, 32),
    (16, 1, 32),
]
QUICK_GRID = [(1, 1, 1), (1, 1, 16), (1, 8, 16), (1, 16, 16), (4, 4, 16)]
WER_SLACK = 0.002  # a recommended shape's WER is at most the best one's plus this


def cuda_devices() -> int:
    """CUDA devices CTranslate2 sees (0 without CTranslate2's CUDA or a device)."""
    try:
        import ctranslate2

        return int(ctranslate2.get_cuda_device_count())
    except Exception:
        return 0


def chunks_of(clips: Path | None, repeat: int, workdir: Path) -> tuple[list[Any], str]:
    """LibriVox speech cut by the worker's `Cutter` into 30 s chunks, and what is said in it."""
    import numpy as np

    from recall.media.cut import split
    from recall_dev import librivox

    path = workdir / "librivox.wav"
    if clips is not None:  # elsewhere than Debian's package puts them
        librivox.clips = functools.partial(librivox.clips, clips)
    _seconds, said = librivox.recording(path, repeat=repeat)
    with wave.open(str(path)) as w:
        rate = w.getframerate()
        pcm = np.frombuffer(w.readframes(w.getnframes()), "<i2")
    return split(pcm.astype(np.float32) / 32768.0, rate, 30.0), said


@contextmanager
def gpu_watch(index: int = 0) -> Iterator[dict[str, float]]:
    """NVML's utilization and used memory of device `index`, sampled every 50 ms while
    inside: the mean busy percentage and the most memory, in the dict it yields."""
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    out: dict[str, float] = {"busy": 0.0, "memory_gib": 0.0}
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.05):
            samples.append(int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))
            used = pynvml.nvmlDeviceGetMemoryInfo(handle).used / 2**30
            out["memory_gib"] = max(out["memory_gib"], float(used))

    thread = threading.Thread(target=sample, name="nvml", daemon=True)
    thread.start()
    try:
        yield out
    finally:
        stop.set()
        thread.join()
        out["busy"] = sum(samples) / len(samples) if samples else 0.0
        pynvml.nvmlShutdown()


def transcribe_share(engine: Any, job: Any, chunks: list[Any], slots: int, batch: int) -> list[str]:
    """`chunks` transcribed by `slots` threads, each its consecutive share `batch` chunks a
    call with the text before as context: the segments' text in the chunks' order."""
    from recall.engines.base import TranscribeRequest

    share = -(-len(chunks) // slots)
    texts: list[list[str]] = [[] for _ in range(slots)]

    def slot(k: int) -> None:
        mine, context = chunks[k * share : (k + 1) * share], ""
        for i in range(0, len(mine), batch):
            request = TranscribeRequest.of(
                mine[i : i + batch], job=job, language="en", context=context
            )
            said = [s.text for found in engine.transcribe_batch(request) for s in found]
            texts[k] += said
            context = " ".join(said) or context

    threads = [threading.Thread(target=slot, args=(k,), name=f"slot-{k}") for k in range(slots)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [t for part in texts for t in part]


def ready_engine(model: str | None, slots: int, batch: int, device: str, warm: list[Any]) -> Any:
    """A worker's engine of `slots` replicas and `batch` chunks a call, its model loaded."""
    from recall.engines.base import TranscribeRequest
    from recall.engines.whisper import WhisperEngine
    from recall.resources import TranscriptionJob

    engine = WhisperEngine(model=model, batch_size=batch, streams=slots, device=device)
    spec = {"source": {"url": "file:///librivox.wav"}, "language": "en"}
    job = TranscriptionJob.from_api({"metadata": {"name": "gpu"}, "spec": spec})
    engine.transcribe_batch(TranscribeRequest.of(warm[:batch], job=job, language="en"))
    return engine, job


def run_shape(
    model: str | None,
    chunks: list[Any],
    slots: int,
    batch: int,
    device: str = "cuda",
    processes: int = 1,
) -> dict[str, Any]:
    """One shape over `chunks`: its figures and the text, in the chunks' order. With
    `processes` above 1 the chunks are shared among that many worker processes of `slots`
    slots each (`serve`), started and loaded before the clock starts."""
    if processes > 1:
        return _run_processes(model, chunks, slots, batch, device, processes)
    engine, job = ready_engine(model, slots, batch, device, chunks)
    with gpu_watch() as gpu:
        wall, cpu = time.perf_counter(), time.process_time()
        texts = transcribe_share(engine, job, chunks, slots, batch)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    row = _row(chunks, slots, batch, 1, wall, cpu, gpu, " ".join(texts))
    row["device"] = "/".join(engine.device_of(job) or ("cuda", "?"))
    return row


def _row(
    chunks: list[Any],
    slots: int,
    batch: int,
    processes: int,
    wall: float,
    cpu: float,
    gpu: dict[str, float],
    text: str,
) -> dict[str, Any]:
    seconds = sum(c.duration for c in chunks)
    return {
        "processes": processes,
        "slots": slots,
        "batch": batch,
        "audio_per_wall_second": round(seconds / wall, 1),
        "gpu_busy_percent": round(gpu["busy"], 1),
        "gpu_memory_gib": round(gpu["memory_gib"], 2),
        "cpu_cores_busy": round(cpu / wall, 2),
        "text": text,
    }


def _run_processes(
    model: str | None, chunks: list[Any], slots: int, batch: int, device: str, processes: int
) -> dict[str, Any]:
    import subprocess
    import sys

    import numpy as np

    with tempfile.TemporaryDirectory(prefix="recall-gpu-serve-") as tmp:
        np.save(Path(tmp) / "audio.npy", np.concatenate([c.audio for c in chunks]))
        (Path(tmp) / "chunks.json").write_text(
            json.dumps([[c.index, c.start, c.duration, c.first, c.end] for c in chunks])
        )
        command = [sys.executable, "-m", "bench.gpu", "--serve", tmp, "--slots", str(slots)]
        command += ["--batch", str(batch), "--device", device, "--parts", str(processes)]
        command += ["--model", model] if model else []
        procs = [
            subprocess.Popen(
                [*command, "--part", str(k)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for k in range(processes)
        ]
        for p in procs:  # each has loaded its model and warmed it (its logs come first)
            assert p.stdout is not None
            while (line := p.stdout.readline()) and line.strip() != "ready":
                pass
        with gpu_watch() as gpu:
            wall = time.perf_counter()
            for p in procs:
                assert p.stdin is not None
                p.stdin.write("go\n")
                p.stdin.flush()
            answers = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
            wall = time.perf_counter() - wall
    cpu = sum(a["cpu"] for a in answers)
    text = " ".join(t for a in answers for t in a["texts"])
    return _row(chunks, slots, batch, processes, wall, cpu, gpu, text)


def stages(
    model: str | None, chunks: list[Any], batch: int, device: str = "cuda"
) -> dict[str, Any]:
    """One slot's CPU per audio second on the device, the model's calls against each stage
    around them (`bench.enginecpu`'s ledger; the media is cut already)."""
    from bench.enginecpu import Ledger, instrumented
    from recall.engines.whisper.model import load_model

    engine, job = ready_engine(model, 1, batch, device, chunks)
    loaded = load_model(
        str(engine.local_model(job).path), engine.threads, engine.placement, engine.streams
    )
    ledger = Ledger()
    with instrumented(ledger, loaded):
        wall, cpu = time.perf_counter(), time.process_time()
        transcribe_share(engine, job, chunks, 1, batch)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    per = 1000.0 / sum(c.duration for c in chunks)
    inside = sum(v for k, v in ledger.seconds.items() if k.startswith("model: "))
    around = {k: v for k, v in ledger.seconds.items() if not k.startswith("model: ")}
    around["other (engine and pipeline Python)"] = cpu - inside - sum(around.values())
    return {
        "batch": batch,
        "audio_per_wall_second": round(1000.0 / per / wall, 1),
        "cpu_ms_per_audio_s": round(cpu * per, 3),
        "model_ms_per_audio_s": round(inside * per, 3),
        "outside_ms_per_audio_s": round((cpu - inside) * per, 3),
        "stages": {k: round(v * per, 3) for k, v in sorted(around.items(), key=lambda kv: -kv[1])},
    }


def serve(directory: Path, part: int, parts: int, slots: int, batch: int, device: str,
          model: str | None) -> None:  # fmt: skip
    """A worker process of `_run_processes`: its share of the chunks saved in `directory`,
    transcribed after "go" on stdin; its CPU seconds and text as JSON on stdout."""
    import numpy as np

    from recall.media.types import Chunk

    audio = np.load(directory / "audio.npy")
    listed = json.loads((directory / "chunks.json").read_text())
    chunks, at = [], 0
    for index, start, duration, first, end in listed:
        size = end - first
        chunks.append(Chunk(index, start, duration, audio[at : at + size], first, end))
        at += size
    share = -(-len(chunks) // parts)
    mine = chunks[part * share : (part + 1) * share]
    engine, job = ready_engine(model, slots, batch, device, mine or chunks)
    print("ready", flush=True)
    input()
    cpu = time.process_time()
    texts = transcribe_share(engine, job, mine, slots, batch) if mine else []
    print(json.dumps({"cpu": time.process_time() - cpu, "texts": texts}), flush=True)


def measure(
    quick: bool = False,
    *,
    model: str | None = None,
    clips: Path | None = None,
    repeat: int | None = None,
    grid: list[tuple[int, int, int]] | None = None,
) -> dict[str, Any]:
    """The figures of the module docstring, or {"skipped": why} without a CUDA device."""
    devices = cuda_devices()
    if devices == 0:
        why = "no CUDA device visible (CTranslate2 counts none)"
        print(f"[bench] gpu: skipped: {why}", flush=True)
        return {"skipped": why}
    import jiwer

    from recall_dev.speech import normalise

    with tempfile.TemporaryDirectory(prefix="recall-gpu-") as tmp:
        chunks, said = chunks_of(clips, repeat or (40 if quick else 200), Path(tmp))
    rows = []
    for processes, slots, batch in grid or (QUICK_GRID if quick else GRID):
        row = run_shape(model, chunks, slots, batch, processes=processes)
        _forget_models()
        row["wer"] = round(jiwer.wer(normalise(said), normalise(row.pop("text"))), 4)
        print(f"[bench] gpu: {json.dumps(row)}", flush=True)
        rows.append(row)
    split = stages(model, chunks, 16)
    print(f"[bench] gpu: stages {json.dumps(split)}", flush=True)
    best = min(r["wer"] for r in rows)
    fit = [r for r in rows if r["wer"] <= best + WER_SLACK and r["processes"] == 1]
    pick = max(fit, key=lambda r: r["audio_per_wall_second"])
    return {
        "devices": devices,
        "audio_seconds": round(sum(c.duration for c in chunks), 1),
        "chunks": len(chunks),
        "shapes": rows,
        "recommended": {"slots": pick["slots"], "batch": pick["batch"]},
        "gpu_name": _gpu_name(),
        "stages": split,
    }


def _forget_models() -> None:
    """The process's loaded models released, so the next shape's GPU memory is its own."""
    import gc

    from recall.engines.whisper import model

    model._models.clear()
    gc.collect()


def _gpu_name() -> str:
    import pynvml

    pynvml.nvmlInit()
    try:
        return str(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0)))
    finally:
        pynvml.nvmlShutdown()


def markdown(section: dict[str, Any]) -> list[str]:
    """The gpu section of docs/benchmarks.md."""
    from bench.report import _table

    lines = ["## The engine on a GPU", ""]
    if "skipped" in section:
        return [*lines, f"Skipped: {section['skipped']}.", ""]
    lines += [
        f"The real Whisper engine (bundled tiny.en, {section.get('gpu_name', 'CUDA')}, "
        f"{section['shapes'][0].get('device', 'compute type auto: float16')}) over "
        f"{section['audio_seconds']} s of LibriVox read speech in {section['chunks']} chunks "
        "cut by the worker's `Cutter`, one thread per slot, each slot its own share of the "
        "chunks; rows *in N processes* spread the same slots over N worker processes "
        f"(`bench/gpu.py` says how each figure is taken). {section.get('note', '')}".rstrip(),
        "",
    ]
    rows = [
        [
            f"{r['slots']} × {r['batch']}"
            + (f" in {r['processes']} processes" if r["processes"] > 1 else ""),
            r["audio_per_wall_second"],
            r["gpu_busy_percent"],
            r["gpu_memory_gib"],
            r["cpu_cores_busy"],
            r["wer"],
        ]
        for r in section["shapes"]
    ]
    lines += _table(
        [
            "slots × batchSize",
            "audio s per wall s",
            "GPU busy %",
            "GPU memory GiB",
            "CPU cores busy",
            "WER",
        ],
        rows,
    )
    pick = section["recommended"]
    lines += [f"Recommended: slots {pick['slots']}, batchSize {pick['batch']}.", ""]
    split = section.get("stages")
    if split:
        lines += [
            f"One slot, {split['batch']} chunks a call: {split['cpu_ms_per_audio_s']} ms of CPU "
            f"per audio second, {split['model_ms_per_audio_s']} in the model's calls and "
            f"{split['outside_ms_per_audio_s']} outside them:",
            "",
        ]
        lines += _table(
            ["stage outside the model", "CPU ms per audio s"],
            [[k, v] for k, v in split["stages"].items()],
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a model directory (default: the bundled tiny.en)")
    parser.add_argument("--clips", type=Path, help="the LibriVox clips' directory")
    parser.add_argument("--repeat", type=int, default=200, help="the clips, times over")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)  # a helper process
    parser.add_argument("--part", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--parts", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--slots", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=16, help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.part, args.parts, args.slots, args.batch, args.device, args.model)
        return 0
    result = measure(args.quick, model=args.model, clips=args.clips, repeat=args.repeat)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    for line in markdown(result):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
