"""The base every other package stands on: settings, logs, metrics, the clock, fault points.

- `settings`: the one validated settings object per component (environment `RECALL_*`);
- `log`: structlog, JSON in a cluster and readable on a terminal, with fixed keys;
- `metrics`: the Prometheus metrics, one registry, and the `/metrics` server;
- `clock`: the injected monotonic clock (CLOCK_BOOTTIME) and the wall clock;
- `endpoint`: the small GET endpoint the probes and KEDA's metrics are served from;
- `faults`: named crash, freeze and lost-answer points for the fault tests (off in production).

May import the standard library and third-party packages only: nothing of `recall`.
"""
