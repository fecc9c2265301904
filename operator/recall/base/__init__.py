"""The base every other package stands on: settings, logs, metrics, the clock, fault points.

`settings` (one validated object per component, `RECALL_*`), `log` (structlog, fixed keys),
`metrics` (Prometheus, one registry), `clock` (the injected clock), `endpoint` (the GET endpoint
of the probes and KEDA), `faults` (crash, freeze and lost-answer points for the fault tests;
off in production).

May import the standard library and third-party packages only: nothing of `recall`.
"""
