"""The operator: fans Batches out into jobs, reclaims expired leases, offers work, projects.

- `controller`: the loop (tick, reclaim at expiry, offers, clean-up), `run_once` per tick;
- `reconcile` (pure plan) and `apply` (the only writer of the operator's decisions);
- `projection` (the Batch status from its jobs), `items` and `fanout` (a Batch's items and the
  job each becomes), `dispatch` (which job to offer which idle worker);
- `cache` (compact records of every job), `registry` (live workers), `leader` (election);
- `handlers` and `runner`: the kopf handlers and `recall operator`; `discovery`: kopf starts
  once the API server serves the resources, and the operator exits if kopf resolved none.

Meets the worker only through the API server: never imports `recall.worker`. May import the
fenced write, the transcripts, the stores, the protocol, the resources and the base.
"""
