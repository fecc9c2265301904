"""The worker: rents one job at a time under a lease and transcribes it chunk by chunk.

- `loop`: the worker loop (pick, claim, transcribe, complete; SIGTERM, idle exit), with
  `slots` (the jobs its slots took, within `max_jobs`), `engine_thread` (each slot's engine
  thread) and `probes` (a model cache or results store that refused, until it works again);
- `holder`: one held lease — claim, renew, complete, fail, release — with `deadline` (the
  renew deadline, and the one retry loop of a lease write) and `heartbeat`;
- `attempt`: one attempt's transcription (fetch, decode, engine calls, checkpoints), with
  `storing` (its results-store calls, retried) and `hand_in` (the transcript, then complete);
- `queue`: the worker's view of its offers (or of the whole queue);
- `registration`: the worker's own registration Lease; `health`: `/healthz` and `/readyz`.

Meets the operator only through the API server: never imports `recall.operator`. May import
the fenced write, the transcripts, the stores, the protocol, the engines, the media, the
resources and the base.
"""
