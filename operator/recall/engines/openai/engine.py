"""The OpenAI-compatible engine: one POST per chunk, retried on the engine's clock
(`recall.engines.openai` states the contract)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from recall.base import log
from recall.base.clock import SYSTEM, Clock
from recall.engines.base import Detected, TranscribeRequest, primary_language, transcribe_each
from recall.engines.languages import MULTILINGUAL, TRANSLATE, language_code
from recall.engines.openai.response import error_message, has_text, parse_segments
from recall.engines.openai.retry import BACKOFF_BASE, retriable_status, retry_backoff, retry_delay
from recall.engines.prompt import hotwords, prompt_of
from recall.media import SAMPLE_RATE, MediaOptions, encode_wav, load_job_media
from recall.media.fetch import ObjectReader
from recall.media.types import Chunk, Media, Segment
from recall.resources import AUTO
from recall.resources.errors import JobFailure

if TYPE_CHECKING:
    from recall.base.settings import WorkerSettings
    from recall.resources import TranscriptionJob

KEPT_ANSWERS = 64  # answers kept from detection for the chunk's transcription at most

_log = log.get("engine")


class OpenAIEngine:
    name = "openai"
    batch_size = 1

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        api_key_file: Path | None = None,
        timeout: float = 120.0,
        max_retries: int = 5,
        backoff_base: float = BACKOFF_BASE,
        media: MediaOptions | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        self.url = base_url.rstrip("/") + "/audio/transcriptions"
        self.model = model
        self.api_key_env = api_key_env
        self.api_key_file = api_key_file
        self.backoff = retry_backoff(max_retries, backoff_base)
        self.clock = clock
        self.media = media or MediaOptions()
        self._client = httpx.Client(timeout=httpx.Timeout(timeout))
        self._lock = threading.Lock()
        # (job, chunk) -> the answer detection got, until the chunk's `transcribe` takes it
        self._kept: dict[tuple[str, int], dict[str, Any]] = {}
        self._unreported = False  # the server answered text without a language

    @classmethod
    def from_settings(
        cls, settings: WorkerSettings, objects: ObjectReader | None = None
    ) -> OpenAIEngine:
        return cls(
            base_url=settings.openai_base_url,
            model=settings.openai_model,
            api_key_env=settings.openai_api_key_env,
            api_key_file=settings.openai_api_key_file,
            timeout=settings.openai_timeout,
            max_retries=settings.openai_max_retries,
            media=MediaOptions.from_settings(settings, objects),
        )

    def close(self) -> None:
        self._client.close()

    def label(self) -> str:
        return f"openai/{self.model}"

    def load_media(self, job: TranscriptionJob) -> Media:
        return load_job_media(job, self.media)

    def transcribe_batch(self, request: TranscribeRequest) -> list[list[Segment]]:
        return transcribe_each(self, request)

    def detect_language(self, request: TranscribeRequest) -> Detected | None:
        chunk, job, cancel = request.chunk, request.job, request.cancel
        refuse(self.label(), job)
        options = job.spec.language_options or []
        if self._unreported and not options:
            return None
        # A server that reports no language is asked in the first option at once.
        asked = options[0] if self._unreported else None
        data = self._request(chunk, self._fields(job, asked, ""), cancel)
        if data is None:
            return None  # cancelled: the caller discards what follows
        code = language_code(data.get("language")) if asked is None else asked
        if has_text(data) and code is None:
            self._unreported = True  # text without a language: do not ask it again
            _log.info("engine_reports_no_language", engine=self.name, url=self.url)
        if has_text(data) and options and code not in options:
            # None reported, or one the job does not allow: the chunk again in its first option
            asked = options[0]
            data = self._request(chunk, self._fields(job, asked, ""), cancel)
            if data is None:
                return None
        self._keep(job, chunk, data)
        if not has_text(data):
            return None  # nothing said: ask again with the next chunk
        if asked is not None:  # chosen, not detected: flagged LanguageUncertain
            return Detected(asked, 0.0)
        return None if code is None else Detected(code, None)

    def model_of(self, job: TranscriptionJob) -> tuple[str, str] | None:
        """The model name sent to the server (its digest is the server's secret)."""
        return self._model(job), ""

    def device_of(self, job: TranscriptionJob) -> tuple[str, str] | None:
        """None: the model runs on the server, on hardware it does not name."""
        del job
        return None

    def _model(self, job: TranscriptionJob) -> str:
        return job.spec.engine.model if job.spec.engine and job.spec.engine.model else self.model

    def api_key(self) -> str | None:
        if self.api_key_file is not None:
            try:
                return self.api_key_file.read_text().strip() or None
            except OSError as e:  # a Secret not mounted yet, or mounted elsewhere
                raise JobFailure(
                    "EngineUnauthorized",
                    f"cannot read the API key file {self.api_key_file}: {e.strerror or e}",
                    permanent=False,
                ) from None
        return os.environ.get(self.api_key_env, "").strip() or None

    def transcribe(self, request: TranscribeRequest) -> list[Segment]:
        chunk, job, context = request.chunk, request.job, request.context
        refuse(self.label(), job)
        words = bool(job.spec.transcript and job.spec.transcript.needs_words)
        kept = self._take(job, chunk)
        if kept is not None and not context:  # asked when the language was detected
            return self._segments(kept, chunk, words=words)
        data = self._request(chunk, self._fields(job, request.language, context), request.cancel)
        return [] if data is None else self._segments(data, chunk, words=words)

    def _fields(
        self, job: TranscriptionJob, language: str | None, context: str
    ) -> dict[str, str | list[str]]:
        """The form of a chunk's request, but for the file."""
        fields: dict[str, str | list[str]] = {
            "model": self._model(job),
            "response_format": "verbose_json",
        }
        if job.spec.transcript and job.spec.transcript.needs_words:  # redaction, speakers too
            fields["timestamp_granularities[]"] = ["word", "segment"]
        lang = primary_language(language)
        if lang and lang != AUTO:
            fields["language"] = lang
        prompt = " ".join(p for p in (hotwords(job.spec.vocabulary), prompt_of(context)) if p)
        if prompt:
            fields["prompt"] = prompt
        return fields

    def _request(
        self, chunk: Chunk, fields: dict[str, str | list[str]], cancel: threading.Event
    ) -> dict[str, Any] | None:
        """The server's JSON answer for `chunk`, retried as the module contract says; None once
        `cancel` is set."""
        wav = encode_wav(chunk.audio, SAMPLE_RATE)
        filename = f"chunk-{chunk.index:05d}.wav"
        retries = 0
        while not cancel.is_set():
            answer = self._post(fields, filename, wav)
            if isinstance(answer, httpx.Response):
                return self._json(answer)
            status, problem, response_headers = answer
            delay = retry_delay(
                status, response_headers, retries, self.clock.now(), backoff=self.backoff
            )
            what = f"{status}: {problem}" if status is not None else problem
            if delay is None:
                raise JobFailure(
                    "EngineUnavailable",
                    f"{self.url}: {' '.join(what.split())[:300]} (after {retries + 1} tries)",
                    permanent=False,
                )
            _log.warning(
                "engine_retry",
                engine=self.name,
                chunk=chunk.index,
                status=status,
                error=what,
                retry=retries + 1,
                delay=round(delay, 3),
            )
            retries += 1
            self.clock.wait(cancel, delay)
        return None

    def _keep(self, job: TranscriptionJob, chunk: Chunk, data: dict[str, Any]) -> None:
        """Keep the answer detection got for `chunk`, for its `transcribe`."""
        with self._lock:
            self._kept[(job.metadata.uid or job.name, chunk.index)] = data
            while len(self._kept) > KEPT_ANSWERS:  # a lease lost between the two: forget
                self._kept.pop(next(iter(self._kept)))

    def _take(self, job: TranscriptionJob, chunk: Chunk) -> dict[str, Any] | None:
        with self._lock:
            return self._kept.pop((job.metadata.uid or job.name, chunk.index), None)

    def _post(
        self, fields: dict[str, str | list[str]], filename: str, wav: bytes
    ) -> httpx.Response | tuple[int | None, str, dict[str, str]]:
        """One request: the successful response, or (status, problem, headers) of a failure
        worth retrying (status None: no answer). Raises `JobFailure` for a permanent one."""
        key = self.api_key()
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        try:
            response = self._client.post(
                self.url,
                data=fields,
                files={"file": (filename, wav, "audio/wav")},
                headers=headers,
            )
        except httpx.TransportError as e:
            return None, str(e) or type(e).__name__, {}
        if response.is_success:
            return response
        status = response.status_code
        problem = error_message(response.content, response.reason_phrase)
        if status in (401, 403):
            raise JobFailure("EngineUnauthorized", f"{status}: {problem}", permanent=True)
        if not retriable_status(status):
            raise JobFailure("EngineRejected", f"{status}: {problem}", permanent=True)
        return status, problem, dict(response.headers)

    def _json(self, response: httpx.Response) -> dict[str, Any]:
        try:
            data = response.json()
        except ValueError as e:
            raise self._unreadable(e) from None
        if not isinstance(data, dict):
            raise self._unreadable(ValueError("the response is not a JSON object"))
        return data

    def _segments(self, data: dict[str, Any], chunk: Chunk, *, words: bool) -> list[Segment]:
        try:
            return parse_segments(data, chunk.duration, words=words)
        except (ValueError, TypeError, AttributeError) as e:
            raise self._unreadable(e) from None

    def _unreadable(self, e: Exception) -> JobFailure:
        return JobFailure(
            "EngineBadResponse",
            f"{self.url}: unreadable transcription response ({' '.join(str(e).split())[:200]})",
            permanent=False,
        )


def refuse(label: str, job: TranscriptionJob) -> None:
    """Fail a job permanently, naming the engine, for what the API cannot do: a translation
    beside the transcript, a language per segment (the contract)."""
    t = job.spec.transcript
    if t is not None and t.translate == "en":
        raise JobFailure(
            "TranslationUnsupported",
            f"engine {label} cannot translate beside the transcript ({TRANSLATE} en): the API "
            "answers one transcription per request, in one language; use the whisper engine "
            f"and {MULTILINGUAL}",
            permanent=True,
        )
    if job.spec.language_scope == "segment":
        raise JobFailure(
            "LanguageDetectionUnsupported",
            f"engine {label} cannot detect a language per segment (spec.languageScope "
            "segment): the API reports one language per request; use languageScope file, or "
            f"the whisper engine and {MULTILINGUAL}",
            permanent=True,
        )
