"""The OpenAI-compatible engine: each chunk is POSTed to `{base_url}/audio/transcriptions`.

Contract:
- One multipart request per chunk: `file` (the chunk as 16-bit PCM mono WAV, built in
  memory), `model` (the job's `spec.engine.model`, else the worker's), `language` when the
  job sets one (its primary subtag: "en-US" → "en") and `response_format=verbose_json`. The
  response's segments come back relative to the chunk, clamped to [0, chunk.duration]; a
  response without segments becomes one segment spanning the chunk (none if the text is
  empty). When the job asks for words they come from the response's `words`, punctuated as the
  segment's text writes them; a segment that gets none has `words` None
  (`response.parse_segments`).
- The API key is read for every request, from `openai_api_key_file` (a mounted Secret, so a
  rotated key is picked up) or else from the variable named by `openai_api_key_env`, and sent
  as a Bearer token. Without either, requests carry no Authorization (a local server).
- Retries: on 408, 429, 5xx and transport errors (timeouts, refused or reset connections),
  up to `openai_max_retries` times, waiting as `retry.retry_delay` decides: the server's
  `Retry-After` (seconds or an HTTP date) when given, else exponential backoff with jitter
  (`retry.retry_backoff`, a `recall.base.backoff.Backoff`). Waits are on the engine's `Clock`
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

The parts: `engine` (the requests, the API key, the answers detection keeps), `retry` (when
to try again: pure), `response` (the server's answers read: pure).
"""

from __future__ import annotations

from recall.engines.openai.engine import OpenAIEngine

__all__ = ["OpenAIEngine"]
