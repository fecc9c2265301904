"""Events out (DESIGN §4e): signed CloudEvents to a team's sinks, at least once, never lost.

- `events`: the event types, their stable ids and their data (pure; no transcript text);
- `sign`: the `Recall-Signature` header (HMAC-SHA256 over a timestamp and the body), and the
  receivers' check;
- `send`: one HTTP POST that follows no redirects and refuses loopback, link-local and
  metadata addresses unless allowed, checked on the address it connects to (DNS rebinding);
- `settings`: `NotifySettings` (`RECALL_NOTIFY_*`): the cluster-wide default sinks, the
  allow-list, backoff, the bound on events in flight per sink;
- `state`: what is kept in memory of each owed event and sink (pure), and what is owed;
- `index`: a Batch's item events as counts, the tries queued per sink by time, the deleted
  objects' deadlines: what keeps a pass from walking every event or item;
- `records`: the events objects owe, read from the API server, and their records in status;
- `outbox`: the loaded events and their deliveries (signed, bounded per sink, retried);
- `notifier`: `Notifier`, the leader's loop: what is owed, loaded, recorded.
"""
