"""The OpenAI-compatible engine: each chunk is POSTed to `{base_url}/audio/transcriptions`.

Contract:
- One multipart request per chunk: `file` (the chunk as 16-bit PCM mono WAV, built in
  memory), `model` (the job's `spec.engine.model`, else the worker's), `language` when the
  job sets one (its primary subtag: "en-US" → "en") and `response_format=verbose_json`. The
  response's segments come back relative to the chunk, clamped to [0, chunk.duration]; a
  response without segments becomes one segment spanning the chunk (none if the text is
  empty). When the job asks for words they come from the response's `words`, punctuated as the
  segment's text writes them; a segment that gets none has `words` None (`parse_segments`).
- The API key is read for every request, from `openai_api_key_file` (a mounted Secret, so a
  rotated key is picked up) or else from the variable named by `openai_api_key_env`, and sent
  as a Bearer token. Without either, requests carry no Authorization (a local server).
- Retries: on 408, 429, 5xx and transport errors (timeouts, refused or reset connections),
  up to `openai_max_retries` times, waiting as `retry_delay` decides: the server's
  `Retry-After` (seconds or an HTTP date) when given, else exponential backoff with jitter
  (`retry_backoff`, a `recall.base.backoff.Backoff`). Waits are on the engine's `Clock`
  (`recall.base.clock`), which ends them as soon as `cancel` is set, so a lost lease ends them
  at once; after `cancel` is set no new request starts and `transcribe` returns `[]` (the
  caller discards it anyway).
- Errors: 401/403 → `EngineUnauthorized`; other 4xx → `EngineRejected` with
  "<status>: <the server's message>"; both permanent. Retries spent, a `Retry-After` longer
  than `RETRY_AFTER_MAX`, or an unreadable 2xx body → `EngineUnavailable` /
  `EngineBadResponse`, retriable: the job is retried later by the lease protocol's backoff,
  and the worker is free meanwhile.
- Language: for a job whose `spec.language` is `auto` or empty, the worker asks
  `detect_language` once per file, at the first chunk with text. It sends that chunk as its
  transcription is sent, without a language, and takes the language the server reports
  (`verbose_json`'s `language`: OpenAI writes a name, "english", other servers a code; both
  become the ISO 639-1 code, `recall.engines.languages`), without a probability: the API gives
  none. The answer is kept and is that chunk's transcription (its `transcribe` sends nothing),
  so detecting costs no request of its own; every later chunk is sent with the language, as
  local Whisper transcribes a file in the language detected once. A chunk without text
  detects nothing (the next is asked); a server that answers text without a language is not
  asked again by this process, and its jobs record no language.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import threading
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from recall.base import log
from recall.base.backoff import Backoff
from recall.base.clock import SYSTEM, Clock
from recall.engines.base import Detected, TranscribeRequest, primary_language, transcribe_each
from recall.engines.languages import language_code
from recall.engines.prompt import hotwords, prompt_of
from recall.media import SAMPLE_RATE, MediaOptions, encode_wav, load_job_media
from recall.media.fetch import ObjectReader
from recall.media.types import Chunk, Media, Segment, Word
from recall.resources import AUTO
from recall.resources.errors import JobFailure

if TYPE_CHECKING:
    from recall.base.settings import WorkerSettings
    from recall.resources import TranscriptionJob

BACKOFF_BASE = 1.0  # seconds before the first retry (before jitter)
BACKOFF_CAP = 30.0  # longest computed backoff
RETRY_AFTER_MAX = 120.0  # a server asking for a longer pause is treated as unavailable
KEPT_ANSWERS = 64  # answers kept from detection for the chunk's transcription at most

_log = log.get("engine")


# --- the retry decision (pure) --------------------------------------------------------------


def retriable_status(status: int) -> bool:
    """Statuses worth repeating the same request for."""
    return status in (408, 429) or 500 <= status <= 599


def parse_retry_after(value: str | None, now: dt.datetime) -> float | None:
    """Seconds a `Retry-After` header asks for (delta-seconds or an HTTP date), or None."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT by definition
        when = when.replace(tzinfo=dt.UTC)
    return max(0.0, (when - now).total_seconds())


def retry_backoff(max_retries: int, base: float = BACKOFF_BASE) -> Backoff:
    """The engine's computed backoff: `min(BACKOFF_CAP, base * 2**retry)` spread over
    [50 %, 100 %) of itself ("equal jitter": a `Backoff` from half of it, stretched by up to
    itself), for `max_retries` retries."""
    return Backoff(
        initial=min(base, BACKOFF_CAP) / 2,
        cap=BACKOFF_CAP / 2,
        jitter=1.0,
        steps=max(0, max_retries),
    )


def retry_delay(
    status: int | None,
    headers: Mapping[str, str],
    retry: int,
    now: dt.datetime,
    *,
    backoff: Backoff,
    u: float | None = None,
) -> float | None:
    """Seconds to wait before retrying, or None to stop.

    `status` is None for a transport error (no response); `retry` counts the retries already
    made (0 after the first failure); none is left once `backoff` is exhausted. A `Retry-After`
    is obeyed as given, unless it exceeds `RETRY_AFTER_MAX`; else the delay is
    `backoff.delay(retry)`, its jitter share `u` given (pure) or drawn by the backoff.
    """
    if backoff.exhausted(retry):
        return None
    if status is not None and not retriable_status(status):
        return None
    header = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    asked = parse_retry_after(header, now) if status is not None else None
    if asked is not None:
        return asked if asked <= RETRY_AFTER_MAX else None
    return backoff.delay(retry, u=u)


# --- responses (pure) -----------------------------------------------------------------------


def error_message(body: bytes, fallback: str) -> str:
    """The server's explanation from an error body (OpenAI, FastAPI or plain), one line."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data: Any = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        for key in ("error", "message", "detail"):
            value = data.get(key)
            if isinstance(value, dict):
                value = value.get("message")
            if isinstance(value, str) and value.strip():
                text = value
                break
    flat = " ".join(text.split()) or fallback
    return flat if len(flat) <= 300 else flat[:299] + "…"


def parse_segments(data: Any, duration: float, *, words: bool = False) -> list[Segment]:
    """Segments of a `verbose_json` transcription, clamped to [0, duration]; with `words`,
    the response's words (`timestamp_granularities[]=word`) each in the segment its middle
    falls in (or the nearest), carrying the segment's confidence as its probability (the API
    gives words no probability of their own) and the punctuation the segment's text writes
    around it (the API's words have none: `punctuated`). A segment no word fell in has `words`
    None, as has every segment of a response without `words`: no word timings, never an
    empty list."""
    if not isinstance(data, dict):
        raise ValueError("the response is not a JSON object")
    segments: list[Segment] = []
    for item in data.get("segments") or []:
        text = str(item.get("text", "")).strip() if isinstance(item, dict) else ""
        if not text:
            continue
        start = min(max(float(item.get("start", 0.0)), 0.0), duration)
        end = min(max(float(item.get("end", duration)), start), duration)
        logprob = item.get("avg_logprob")
        confidence = round(min(1.0, math.exp(float(logprob))), 4) if logprob is not None else None
        segments.append(Segment(start=start, end=end, text=text, confidence=confidence))
    if not segments and not data.get("segments"):
        text = str(data.get("text") or "").strip()
        segments = [Segment(start=0.0, end=duration, text=text)] if text else []
    if words:
        segments = _with_words(segments, data.get("words") or [], duration)
    return segments


def _with_words(segments: list[Segment], raw: list[Any], duration: float) -> list[Segment]:
    found: list[list[Word]] = [[] for _ in segments]
    for item in raw:
        if not isinstance(item, dict) or not str(item.get("word", "")).strip() or not segments:
            continue
        start = min(max(float(item.get("start", 0.0)), 0.0), duration)
        end = min(max(float(item.get("end", start)), start), duration)
        middle = (start + end) / 2
        k = min(
            range(len(segments)),
            key=lambda i: max(segments[i].start - middle, 0.0, middle - segments[i].end),
        )
        s = segments[k]
        text = " " + str(item["word"]).strip()
        probability = s.confidence if s.confidence is not None else 1.0
        found[k].append(
            Word(
                start=max(start, s.start),
                end=min(max(end, start), s.end),
                text=text,
                probability=probability,
            )
        )
    out = []
    for s, ws in zip(segments, found, strict=True):
        floor = s.start
        tidy = []
        for w in sorted(ws, key=lambda w: w.start):
            w = w.model_copy(
                update={"start": max(w.start, floor), "end": max(w.end, w.start, floor)}
            )
            tidy.append(w)
            floor = w.end
        out.append(s.model_copy(update={"words": punctuated(tidy, s.text) or None}))
    return out


LOOKAHEAD = 3  # tokens of the text a word may skip to find itself (a dash, a word it lacks)


def _bare(text: str) -> str:
    return "".join(c for c in text.casefold() if c.isalnum())


def punctuated(words: list[Word], text: str) -> list[Word]:
    """`words` written as `text` writes them: each word matched, in order, to the next token of
    `text` (split at spaces) that is the same word once case and punctuation are set aside
    ("hello" to "Hello,"), and takes that token. A word with no such token within
    `LOOKAHEAD` tokens keeps its own text. Pure."""
    tokens = text.split()
    at = 0
    out = []
    for w in words:
        bare = _bare(w.text)
        match = next(
            (
                k
                for k in range(at, min(at + LOOKAHEAD, len(tokens)))
                if bare and _bare(tokens[k]) == bare
            ),
            None,
        )
        if match is not None:
            w = w.model_copy(update={"text": " " + tokens[match]})
            at = match + 1
        out.append(w)
    return out


def _has_text(data: dict[str, Any]) -> bool:
    """Whether a `verbose_json` answer holds any text."""
    segments = data.get("segments") or []
    return bool(str(data.get("text") or "").strip()) or any(
        isinstance(s, dict) and str(s.get("text") or "").strip() for s in segments
    )


# --- the engine -----------------------------------------------------------------------------


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
        """The language the server reports for `request.chunk` (see the module contract's
        "Language"), without a probability (the API gives none); None when the chunk has no
        text (ask again with the next), or once the server has answered text without a
        language."""
        if self._unreported:
            return None
        chunk, job = request.chunk, request.job
        fields = self._fields(job, None, "")
        data = self._request(chunk, fields, request.cancel)
        if data is None:
            return None  # cancelled: the caller discards what follows
        self._keep(job, chunk, data)
        if not _has_text(data):
            return None  # nothing said: ask again with the next chunk
        code = language_code(data.get("language"))
        if code is None:
            self._unreported = True  # text without a language: do not ask it again
            _log.info("engine_reports_no_language", engine=self.name, url=self.url)
            return None
        return Detected(code, None)

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
        """The key to send, read now (see the module contract); None when none is configured."""
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
        if job.spec.transcript and job.spec.transcript.words:
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
