"""Long recordings through the worker: memory, time, resume cost and transcript sizes.

    .venv/bin/python -m bench.longfile                     # 10 h + 1 h Whisper (~25 min, 2 cores)
    .venv/bin/python -m bench.longfile --hours 1 --whisper-hours 0.1 --russian-hours 0.5

`measure()` returns a dict of figures (`make bench` calls it):

- `simulated_*`: a `hours`-long MP3 through the real audio path (fetch, decode, resample to
  16 kHz, cut with snapping, store the chunks in a results store in memory) by the real
  `Worker` loop with
  the simulated engine emitting English text at 150 words per minute. Peak RSS is the worker
  process's VmHWM (its own child process, started after the source exists); `rss_base` is its
  RSS with everything imported, before the job.
- `resume_*`: the same file resumed at 90 %: by seeking (what a resumed attempt does) and by
  decoding from the start and skipping (the fallback), seconds to the first new chunk.
- `whisper_*`: a `whisper_hours`-long MP3 through the same loop with the local Whisper engine
  (bundled tiny.en, threads = the CPUs available): RSS, real-time factor and word error rate.
- `english_*` / `russian_*`: what the results store holds for `hours` of English (the
  simulated run) and `russian_hours` of Russian-like Cyrillic text (120 words per minute): the
  transcript's bytes, the chunk records (their count and bytes), the largest object, and the
  job's status and whole object as the API server keeps them (a few kilobytes at any length).

The source is speech synthesized by espeak-ng once (about two minutes), encoded once as MP3
(22.05 kHz mono, 24 kbit/s, no Xing header) and repeated frame by frame to the length wanted,
so ten hours cost ~110 MB on disk and seconds to make. Temporary files are removed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import wave
from pathlib import Path
from typing import Any

import av
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RATE = 22_050
BITRATE = 24_000


# --- the source -----------------------------------------------------------------------------


def make_source(out: Path, seconds: float, workdir: Path) -> tuple[Path, str, float]:
    """An MP3 of at least `seconds` of speech at `out`; (path, what was said, its seconds)."""
    from recall_dev import speech

    wav = workdir / "unit.wav"
    spoken = speech.speak_for(110.0, wav, words_per_minute=150)
    with wave.open(str(wav)) as w:
        rate = w.getframerate()
        pcm = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768
    wav.unlink()
    if rate != RATE:
        raise RuntimeError(f"espeak-ng wrote {rate} Hz, expected {RATE}")
    pcm = np.concatenate([pcm, np.zeros(-len(pcm) % 1152, np.float32)])  # whole MP3 frames
    unit = encode_mp3(pcm)
    loops = max(1, round(seconds / (len(pcm) / RATE)))
    with out.open("wb") as f:
        for _ in range(loops):
            f.write(unit)
    return out, " ".join(spoken * loops), loops * len(pcm) / RATE


def encode_mp3(samples: np.ndarray[Any, Any]) -> bytes:
    """`samples` as raw MP3 frames: no ID3 tag and no Xing header, so copies concatenate."""
    buffer = io.BytesIO()
    options = {"write_xing": "0", "id3v2_version": "0", "write_id3v1": "0"}
    with av.open(buffer, "w", format="mp3", options=options) as out:
        stream = out.add_stream("libmp3lame", rate=RATE, layout="mono")
        stream.bit_rate = BITRATE
        for i in range(0, len(samples), 1152):
            frame = av.AudioFrame.from_ndarray(
                np.ascontiguousarray(samples[None, i : i + 1152]), format="fltp", layout="mono"
            )
            frame.sample_rate = RATE
            frame.pts = i
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buffer.getvalue()


# --- one worker run, in its own process -----------------------------------------------------


def rss_mb(key: str = "VmRSS") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one job through the real worker loop on a memory store; figures as a dict."""
    from structlog.testing import capture_logs

    from recall.base.settings import StoreSettings, WorkerSettings
    from recall.bucket import Stores
    from recall.engines.base import Engine
    from recall.engines.simulated import SimulatedEngine
    from recall.engines.whisper import WhisperEngine, available_cpus, bundled_path, load_model
    from recall.media import MediaOptions
    from recall.worker.loop import Worker
    from recall_dev.twin.api import MemoryApi

    media = MediaOptions(chunk_seconds=float(spec["chunk_seconds"]))
    engine: Engine
    if spec["engine"] == "whisper":
        whisper = WhisperEngine(threads=available_cpus(), media=media)
        load_model(str(bundled_path()), whisper.threads)  # before the clock starts
        engine = whisper
    else:
        engine = SimulatedEngine(
            chunk_delay_seconds=0,
            chunks=int(spec.get("chunks") or 1),
            chunk_seconds=float(spec["chunk_seconds"]),
            media=media if spec.get("url") else None,
            words_per_minute=float(spec["wpm"]),
            vocabulary=spec.get("vocabulary", "english"),
        )
    store = MemoryApi(watch_seconds=1.0)
    settings = WorkerSettings(
        id="bench",
        engine="whisper" if spec["engine"] == "whisper" else "simulated",
        idle_exit_seconds=0.5,
        max_jobs=1,
        dispatch="queue",  # no operator here to offer the job: the worker picks from the queue
    )
    results = Stores(StoreSettings(url="memory://bench")).results()
    worker = Worker(store, settings, engine, namespace="default", results=results)
    engine_spec: dict[str, Any] = {"name": settings.engine}
    if spec["engine"] == "simulated":
        engine_spec["simulate"] = {"chunkDelaySeconds": 0}
    manifest: dict[str, Any] = {
        "apiVersion": "recall.dev/v1alpha1",
        "kind": "TranscriptionJob",
        "metadata": {"name": "long"},
        "spec": {
            "source": {"url": spec.get("url") or "file:///simulated"},
            "leaseDurationSeconds": 300,
            "engine": engine_spec,
        },
    }
    if spec["engine"] == "whisper":
        manifest["spec"]["language"] = "en"
    store.create_job("default", manifest)
    base = rss_mb()
    wall, cpu = time.perf_counter(), time.process_time()
    with capture_logs() as logs:
        worker.run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    peak = rss_mb("VmHWM")
    store.close()

    job = store.get_job("default", "long")
    assert job is not None and job.status.result is not None, store.dump()
    totals = [e["chunks_total"] for e in logs if e.get("event") == "chunk_done"]
    out: dict[str, Any] = {
        "phase": str(job.status.phase),
        "audio_seconds": job.status.result.duration_seconds,
        "chunks": job.status.progress.chunks_done if job.status.progress else None,
        "chunks_total_first": totals[0] if totals else None,
        "chunks_total_max": max(totals) if totals else None,
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(cpu, 1),
        "rss_base_mb": round(base, 1),
        "rss_peak_mb": round(peak, 1),
        "words": job.status.result.words,
        "status_bytes": len(json.dumps(job.to_api()["status"])),
        "job_bytes": len(json.dumps(job.to_api())),
        **sizes(results, job),
    }
    if spec.get("reference"):
        out["wer"] = word_error_rate(results, job.status.result.transcript, spec["reference"])
    if spec.get("resume_probe"):
        out |= resume_probe(results, job, spec["url"], media)
    return out


def sizes(results: Any, job: Any) -> dict[str, Any]:
    """What the results store holds for the job: the transcript and the chunk records."""
    from recall.transcripts import job_prefix, parse_scratch

    objects = list(results.list(job_prefix("default", job.name, job.metadata.uid or "")))
    chunks = [o for o in objects if (k := parse_scratch(o.key)) and k.chunk() is not None]
    transcript = next(o for o in objects if o.key == job.status.result.transcript)
    raw = results.get(transcript.key)
    text = " ".join(s.text.strip() for s in _decode(raw).segments if s.text.strip())
    return {
        "transcript_bytes": transcript.size,
        "chunk_objects": len(chunks),
        "chunk_bytes": sum(o.size for o in chunks),
        "largest_object_bytes": max(o.size for o in objects),
        "text_bytes": len(text.encode()),
    }


def _decode(raw: bytes) -> Any:
    from recall.transcripts import Transcript

    return Transcript.decode(raw)


def word_error_rate(results: Any, key: str, reference: str) -> float:
    import jiwer

    from recall.transcripts import load_transcript
    from recall_dev import speech

    transcript = load_transcript(results, key)
    assert transcript is not None
    wer = jiwer.wer(speech.normalise(reference), speech.normalise(transcript.text))
    return round(float(wer), 3)


def resume_probe(results: Any, job: Any, url: str, media_options: Any) -> dict[str, Any]:
    """Seconds to the first chunk after a resume at 90 %: by seeking, and by decoding again."""
    from recall.media import load_media
    from recall.media.types import Resume
    from recall.transcripts import Record, chunk_key, directory_of

    directory = directory_of(job, 1, job.status.result.token)
    total = job.status.progress.chunks_done
    index = int(total * 0.9)
    record = Record.decode(results.get(chunk_key(directory, index)))
    out: dict[str, Any] = {"resume_at_seconds": round(record.end / 16_000)}
    for how, tail in (("seek", record.tail), ("decode", "")):
        began = time.perf_counter()
        with load_media(url, media_options) as media:
            first = next(media.chunks(Resume(index + 1, record.end, tail)))
            out[f"resume_{how}_seconds"] = round(time.perf_counter() - began, 2)
            out[f"resume_{how}_by"] = getattr(media, "resumed_by", None)
        assert first.first == record.end
    return out


def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    env = {**os.environ, "RECALL_LOG_FORMAT": "json", "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "bench.longfile", "--child", json.dumps(spec)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the worker run failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# --- all of it ------------------------------------------------------------------------------


def measure(
    hours: float = 10.0,
    whisper_hours: float = 1.0,
    russian_hours: float = 5.0,
    chunk_seconds: int = 30,
) -> dict[str, Any]:
    """Every figure of the module docstring, as one flat dict."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="recall-longfile-") as tmp:
        workdir = Path(tmp)
        began = time.perf_counter()
        path, _, seconds = make_source(workdir / "long.mp3", hours * 3600, workdir)
        out["source_hours"] = round(seconds / 3600, 2)
        out["source_mb"] = round(path.stat().st_size / 1e6, 1)
        out["source_make_seconds"] = round(time.perf_counter() - began, 1)
        sim = run_child(
            {
                "engine": "simulated",
                "url": path.as_uri(),
                "chunk_seconds": chunk_seconds,
                "wpm": 150,
                "resume_probe": True,
            }
        )
        path.unlink()
        for key in ("audio_seconds", "chunks", "chunks_total_first", "chunks_total_max"):
            out[f"simulated_{key}"] = sim[key]
        for key in ("wall_seconds", "cpu_seconds", "rss_base_mb", "rss_peak_mb"):
            out[f"simulated_{key}"] = sim[key]
        out |= {k: v for k, v in sim.items() if k.startswith("resume_")}
        out |= english_or_russian("english", sim)

        if whisper_hours > 0:
            path, said, _ = make_source(workdir / "hour.mp3", whisper_hours * 3600, workdir)
            whisper = run_child(
                {
                    "engine": "whisper",
                    "url": path.as_uri(),
                    "chunk_seconds": chunk_seconds,
                    "reference": said,
                }
            )
            path.unlink()
            audio = whisper["audio_seconds"]
            out |= {
                "whisper_audio_seconds": audio,
                "whisper_wall_seconds": whisper["wall_seconds"],
                "whisper_cpu_seconds": whisper["cpu_seconds"],
                "whisper_audio_seconds_per_wall_second": round(audio / whisper["wall_seconds"], 1),
                "whisper_rss_base_mb": whisper["rss_base_mb"],
                "whisper_rss_peak_mb": whisper["rss_peak_mb"],
                "whisper_wer": whisper["wer"],
                "whisper_threads": len(os.sched_getaffinity(0)),
            }

    if russian_hours > 0:
        russian = run_child(
            {
                "engine": "simulated",
                "chunks": round(russian_hours * 3600 / chunk_seconds),
                "chunk_seconds": chunk_seconds,
                "wpm": 120,
                "vocabulary": "cyrillic",
            }
        )
        out |= english_or_russian("russian", russian)
    return out


def english_or_russian(prefix: str, run: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "audio_seconds",
        "words",
        "text_bytes",
        "transcript_bytes",
        "chunk_objects",
        "chunk_bytes",
        "largest_object_bytes",
        "status_bytes",
        "job_bytes",
    )
    return {f"{prefix}_{k}": run[k] for k in keys}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=10.0)
    parser.add_argument("--whisper-hours", type=float, default=1.0)
    parser.add_argument("--russian-hours", type=float, default=5.0)
    parser.add_argument("--chunk-seconds", type=int, default=30)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        with contextlib.redirect_stdout(sys.stderr):  # the worker's logs are not the result
            result = child(json.loads(args.child))
        print(json.dumps(result))
        return 0
    result = measure(args.hours, args.whisper_hours, args.russian_hours, args.chunk_seconds)
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
