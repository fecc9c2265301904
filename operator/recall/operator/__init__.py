"""The operator: fans Batches out into jobs, reclaims expired leases, offers work, projects.

One folder per feature, layered top to bottom (an import-linter contract keeps it):

- `runtime/`: kopf's handlers, `recall operator` (the runner), discovery and readiness: the
  wiring that builds every part below and hands each its peers;
- `scaling/`: the built-in autoscaler (`decide` pure, `scaler` its loop), the pool's
  outstanding work (`workload`), the endpoint KEDA reads (`keda`), and `service` that runs them;
- `controller`: the loop (tick, reclaim at expiry, offers, clean-up), `run_once` per tick;
- `results/`: publish accepted results (`publish`), delete the store's garbage (`collect`),
  delete a finished Batch's jobs after its TTL (`retention`); `dispatch`: which job to offer
  which idle worker;
- `reconcile/`: the view of every job (`cache`), a Batch's items (`items`) and the job each
  becomes (`fanout`), the pure plan (`plan`) and projection (`project`), and `apply`, the only
  writer of the operator's decisions;
- `peers/`: the operator's peers: the other replicas (`leader`, election on a Lease) and the
  workers (`registry`, from their registration Leases).

Meets the worker only through the API server: never imports `recall.worker`. May import the
fenced write, the transcripts, the stores, the protocol, the resources and the base.
"""
