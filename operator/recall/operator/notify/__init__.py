"""Events out (DESIGN §4e): signed CloudEvents to a team's sinks, at least once, never lost.

- `events`: the event types, their stable ids and their data (pure; no transcript text);
- `sign`: the `Recall-Signature` header (HMAC-SHA256), and the receivers' check;
- `send`: one HTTP POST: no redirects, no loopback, link-local or metadata address unless allowed;
- `settings`: `NotifySettings` (`RECALL_NOTIFY_*`), the cluster-wide defaults;
- `state`: what is kept in memory of each owed event and sink (pure), and what is owed;
- `index`: what keeps a pass from walking every event or item;
- `records`: the events objects owe, read from the API server, and their records in status;
- `outbox`: the loaded events and their deliveries (signed, bounded per sink, retried);
- `notifier`: `Notifier`, the leader's loop: what is owed, loaded, recorded.
"""
