"""The OpenAI-compatible engine: each chunk is POSTed to `{base_url}/audio/transcriptions`.

Contract:
- One multipart request per chunk: `file` (the chunk as 16-bit PCM mono WAV, built in memory),
  `model` (the job's `spec.engine.model`, else the worker's), `language` when known (its
  primary subtag), `response_format=verbose_json`, and `timestamp_granularities[]` word and
  segment when the job needs words (asked for, or for redaction or speakers). Segments come
  back relative to the chunk, clamped to [0, chunk.duration]; a response without segments is
  one segment spanning the chunk (none if its text is empty). Words, when the job needs them,
  come from the response's `words`, punctuated as the segment's text writes them; a segment
  that gets none has `words` None.
- The API key is read for every request, from `openai_api_key_file` (a mounted Secret: a
  rotated key is picked up), else from the variable `openai_api_key_env` names, and sent as a
  Bearer token; with neither, no Authorization is sent (a local server).
- Retries: on 408, 429, 5xx and transport errors, up to `openai_max_retries` times, after the
  server's `Retry-After` (seconds or an HTTP date) when given, else exponential backoff with
  jitter (`retry`). Waits are on the engine's `Clock`, which ends them as soon as `cancel` is
  set (a lost lease); after that no request starts and `transcribe` returns `[]`.
- Errors: 401/403 → `EngineUnauthorized`; other 4xx → `EngineRejected` ("<status>: <the
  server's message>"); both permanent. Retries spent or a `Retry-After` over `RETRY_AFTER_MAX`
  → `EngineUnavailable`; an unreadable 2xx body → `EngineBadResponse`; both retriable: the
  lease protocol's backoff retries the job later, and the worker is free meanwhile.
- Language: for a job whose `spec.language` is `auto` or empty, `detect_language` sends the
  file's first chunk with text as its transcription would be sent, without a language, and
  takes the language the server reports (OpenAI a name, others a code: both become the code,
  `recall.engines.languages`), without a probability (the API gives none). The answer is kept
  as that chunk's transcription, so detecting costs no request of its own; every later chunk
  is sent with the language, as local Whisper does. A chunk without text detects nothing (the
  next is asked); a server that answers text without a language is not asked again by this
  process, and its jobs record no language. With `spec.languageOptions` the server's language
  is taken when it is one of them; else (another, or none reported) the chunk is sent again in
  the first option, which is the file's, recorded with probability 0 (LanguageUncertain: the
  API gives no probabilities to choose among the options by); a server that reports none is
  sent the first option at once.
- Refused, permanently and naming the engine (the Batch's ModelFailing): a translation beside
  the transcript (`transcript.translate`, `TranslationUnsupported`) and a language per segment
  (`languageScope: segment`, `LanguageDetectionUnsupported`): one request answers one
  transcription in one language.

The parts: `engine` (requests, API key, the answers detection keeps), `retry` (when to try
again: pure), `response` (the server's answers read: pure).
"""

from __future__ import annotations

from recall.engines.openai.engine import OpenAIEngine

__all__ = ["OpenAIEngine"]
