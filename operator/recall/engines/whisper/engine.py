"""`WhisperEngine`: the worker's local Whisper, faster-whisper (CTranslate2, on a CPU or a CUDA
GPU) on each request's chunks, one chunk a call or a batch of chunks in one call.

Contract:
- Device and compute type are placed when the engine is built (`recall.engines.device`: a
  worker configured for a GPU it cannot see refuses to start). `threads` 0 means every CPU the
  process may use. Building one sets process-wide BLAS and malloc options
  (`model.one_blas_thread`, `model.keep_freed_memory`).
- The model is the job's `spec.engine.model`, else the worker's, else the bundled tiny.en:
  "tiny.en", a packaged model (`recall.engines.models.PACKAGED`), a store URL or a directory
  (`recall.engines.models`); any other name fails the job with `ModelNotFound`. It is loaded at
  a job's first chunk and shared by the process (`model.load_model`); `preload()` loads the
  worker's own at once and sets `multilingual`, which the worker's registration carries.
- A model that is missing, corrupt or cannot be loaded fails the job permanently at its first
  chunk, unless the device failed the load (out of memory, a CUDA error: `DeviceFailed`, which
  the worker answers by releasing the job); `ModelUnavailable` is retried (a store that does
  not answer, or a job's store model on an engine without a store). An engine whose own model
  is a store URL and that has no store is not built (`ModelStoreMissing`). For the result,
  `model_of(job)` names the model and its digest, `device_of(job)` the device and compute type
  as CTranslate2 reports them.
- Language: a language the model cannot transcribe raises `UnsupportedLanguage` (permanent: an
  English-only model never transcribes French as English). Detection and what an English-only
  model refuses: `language`.
- `transcribe(request)` is `transcribe_batch` of its one chunk. Both return each chunk's
  non-empty segments timed from the chunk, clamped to [0, chunk.duration] (`decode`). They
  check `cancel` before starting and between the pipeline's steps and return nothing more once
  it is set.
- `label()` names the worker's default model, even for a job that overrides it (the result's
  `model` names the one used).
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from recall.base.settings import default_model_cache_dir
from recall.engines.base import Detected, TranscribeRequest, primary_language
from recall.engines.device import place
from recall.engines.models import (
    PACKAGED,
    LocalModel,
    ModelCache,
    ModelStoreMissing,
    OpenStore,
    is_store_url,
    local_directory,
)
from recall.engines.prompt import hotwords
from recall.engines.whisper import decode, language
from recall.engines.whisper.decode import BEAM_SIZE, Decoding
from recall.engines.whisper.model import (
    BUNDLED,
    available_cpus,
    bundled_local,
    keep_freed_memory,
    load_model,
    model_label,
    one_blas_thread,
)
from recall.media import AudioMedia, MediaOptions, load_job_media
from recall.media.fetch import ObjectReader
from recall.media.types import Segment
from recall.resources import AUTO
from recall.resources.errors import JobFailure

if TYPE_CHECKING:
    from recall.base.settings import WorkerSettings
    from recall.resources import TranscriptionJob


class WhisperEngine:
    name = "whisper"

    def __init__(
        self,
        *,
        model: str | None = None,
        threads: int = 0,
        media: MediaOptions | None = None,
        vad_filter: bool = True,
        models: ModelCache | None = None,
        batch_size: int = 1,
        device: str = "auto",
        compute_type: str = "auto",
        streams: int = 1,
    ) -> None:
        self.model = model
        self.streams = max(1, streams)  # calls at once: the worker's slots (load_model)
        # CTranslate2 reads 0 as "4 threads", which oversubscribes a small pod: 0 = all CPUs.
        self.threads = threads or available_cpus()
        self.media = media or MediaOptions()
        self.beam_size = BEAM_SIZE
        self.vad_filter = vad_filter
        # The worker's default cache: one copy of a packaged model on the machine.
        self.models = models or ModelCache(default_model_cache_dir(), None)
        if model and is_store_url(model) and self.models.open_store is None:
            raise ModelStoreMissing(
                f"the worker's model {model} is in a store, but this worker has no store to "
                "read models from: recall worker reads models with the results store's "
                "settings and credentials (RECALL_STORE_*)"
            )
        self.batch_size = max(1, batch_size)
        self.placement = place(device, compute_type)  # raises DeviceUnavailable: see the contract
        one_blas_thread()  # the features' threads spun more than they computed (model.py)
        keep_freed_memory()  # each window's arrays in the pages the last one freed (model.py)
        self._used: dict[str, LocalModel] = {}  # model name -> the copy last loaded for it
        self._ran: dict[str, tuple[str, str]] = {}  # model name -> (device, compute type)
        self.multilingual: bool | None = None  # the worker's own model's, once `preload` ran

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
            batch_size=settings.batch_size,
            device=settings.device,
            compute_type=settings.compute_type,
            streams=settings.slots,
        )

    def label(self) -> str:
        return f"whisper/{model_label(self.model)}"

    def load_media(self, job: TranscriptionJob) -> AudioMedia:
        return load_job_media(job, self.media)

    # -- models ------------------------------------------------------------------------------

    def wanted(self, job: TranscriptionJob) -> str | None:
        return job.spec.engine.model if job.spec.engine and job.spec.engine.model else self.model

    def local_model(
        self, job: TranscriptionJob, cancel: threading.Event | None = None
    ) -> LocalModel:
        """The job's model on this machine, fetched and checked first if it is in a store."""
        return self._local(self.wanted(job), cancel)

    def preload(self) -> tuple[str, str]:
        """Fetch, check and load the worker's own model now (`model`, else the bundled
        tiny.en), as a job's first chunk would, and keep it for the jobs: (its name or URL, its
        digest). Raises the `JobFailure` that chunk would raise."""
        name = self.model or BUNDLED
        local = self._local(self.model, None)
        model = load_model(str(local.path), self.threads, self.placement, self.streams)
        self._used[name] = local
        self._ran[name] = (str(model.model.device), str(model.model.compute_type))
        self.multilingual = bool(model.model.is_multilingual)
        return local.source, local.digest

    def _local(self, name: str | None, cancel: threading.Event | None) -> LocalModel:
        if not name or name == BUNDLED:
            return bundled_local(self.models)
        if name in PACKAGED:
            return self.models.packaged(PACKAGED[name], cancel)
        if is_store_url(name):
            return self.models.resolve(name, cancel)
        directory = local_directory(name)
        if directory is None:
            raise JobFailure(
                "ModelNotFound",
                f"model {name!r} is neither the bundled {BUNDLED}, a packaged model "
                f"({', '.join(PACKAGED)}), a store URL (s3://, gs://, az://) nor a directory: "
                "workers download no model from the internet; upload it to a store with its "
                "SHA256SUMS and name its URL",
                permanent=True,
            )
        return self.models.local(directory, name)

    def model_of(self, job: TranscriptionJob) -> tuple[str, str] | None:
        """(the model's name or URL, its digest) for `job`'s result: the one its chunks used."""
        local = self._used.get(self.wanted(job) or BUNDLED)
        return (local.source, local.digest) if local else None

    def device_of(self, job: TranscriptionJob) -> tuple[str, str] | None:
        """(device, compute type) `job`'s model ran with, as CTranslate2 reports them."""
        return self._ran.get(self.wanted(job) or BUNDLED)

    def _loaded(self, job: TranscriptionJob, cancel: threading.Event) -> tuple[Any, str]:
        local = self.local_model(job, cancel)
        model = load_model(str(local.path), self.threads, self.placement, self.streams)
        name = self.wanted(job) or BUNDLED
        self._used[name] = local
        self._ran[name] = (str(model.model.device), str(model.model.compute_type))
        return model, model_label(local.source)

    # -- language ----------------------------------------------------------------------------

    def detect_language(self, request: TranscribeRequest) -> Detected | None:
        job, chunk, cancel = request.job, request.chunk, request.cancel
        model, label = self._loaded(job, cancel)
        language.require(model, label, job)
        if not model.model.is_multilingual:
            return Detected("en", None)  # the model's own language, not detected: no probability
        if cancel.is_set():
            return None
        return language.detect(model, chunk.audio, job.spec.language_options)

    def _language_for(self, model: Any, label: str, request: TranscribeRequest) -> str | None:
        """The language code to decode in (None: the model detects it), or the permanent
        failure of a language the model lacks."""
        lang = primary_language(request.language)
        if lang == AUTO:
            if not model.model.is_multilingual:
                self.detect_language(request)  # raises, naming the model
            lang = None  # detected per chunk: the worker had none to pass
        if lang is not None and lang not in language.known(model):
            raise JobFailure(
                "UnsupportedLanguage",
                f"model {label} cannot transcribe language {request.language!r}"
                + ("" if model.model.is_multilingual else " (it is English-only)"),
                permanent=True,
            )
        return lang

    # -- transcription -----------------------------------------------------------------------

    def transcribe(self, request: TranscribeRequest) -> list[Segment]:
        found = self.transcribe_batch(replace(request, chunks=request.chunks[:1]))
        return found[0] if found else []

    def transcribe_batch(self, request: TranscribeRequest) -> list[list[Segment]]:
        if request.cancel.is_set() or not request.chunks:
            return []
        model, label = self._loaded(request.job, request.cancel)
        language.require(model, label, request.job)
        t = request.job.spec.transcript
        decoding = Decoding(
            model=model,
            language=self._language_for(model, label, request),
            context=request.context,
            hotwords=hotwords(request.job.spec.vocabulary),
            beam_size=self.beam_size,
            batch_size=self.batch_size,
            keep_words=bool(t and t.needs_words),
            per_segment=request.job.spec.language_scope == "segment",
            options=tuple(request.job.spec.language_options or ()),
            translate=t is not None and t.translate == "en",
        )
        return decode.transcribe(decoding, list(request.chunks), self.vad_filter, request.cancel)
