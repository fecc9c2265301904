"""The operator: fans Batches out into jobs, reclaims expired leases, offers work, projects.

One folder per feature, layered top to bottom (an import-linter contract keeps it): `runtime/`
(the wiring that builds every part below and hands each its peers), `scaling/`, `controller`
(the loop), then `results/`, `dispatch`, `notify/` and `usage`, then `reconcile/` (its `apply`
the only writer of the operator's decisions), then `peers/`. Each says what it holds.

Meets the worker only through the API server: never imports `recall.worker`. May import the
fenced write, the transcripts, the stores, the protocol, the resources and the base.
"""
