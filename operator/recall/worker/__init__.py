"""The worker: rents one job at a time under a lease and transcribes it chunk by chunk.

- `loop`: pick, claim, transcribe, complete; SIGTERM, idle exit; with `slots` (within
  `max_jobs`), `engine_thread` (each slot's) and `probes` (a refusing cache or store);
- `holder`: one held lease — claim, renew, complete, fail, release — with `deadline` (the
  renew deadline, and the one retry loop of a lease write) and `heartbeat`;
- `attempt`: one attempt's transcription, with `storing` (its store calls, retried) and
  `hand_in` (the transcript, then complete);
- `queue`: its offers (or the whole queue); `registration`: its registration Lease; `health`:
  `/healthz` and `/readyz`.

Meets the operator only through the API server: never imports `recall.operator`. May import
the fenced write, the transcripts, the stores, the protocol, the engines, the media, the
resources and the base.
"""
