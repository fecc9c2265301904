"""The lease protocol's pure verdicts, and the records the operator and the workers share.

- `lease`: claim, renew, complete, fail, release, reclaim, cancel, offer, as pure functions of
  `(job status, now)` returning the new status or a refusal (DESIGN §3); the operator's
  transitions in `lease_operator`, the terms they share in `lease_terms`;
- `observer`: when each lease's renewal was first seen, on the observer's monotonic clock;
  expiry is judged from it, never from a worker's timestamp;
- `workers`: the worker registration record (a coordination.k8s.io Lease) that workers write
  and the operator reads.

No I/O and no clock reads: "now" is passed in. May import `recall.resources` and
`recall.base`; never a store, a component or the engines.
"""
