"""Chaos runs of the whole system on the local control plane, checked against DESIGN §5.

    from recall_dev.chaos import PROFILES, run
    outcome = run(seed=1, profile=PROFILES["short"], workdir=path)
    print(outcome.line)

`python -m recall_dev.chaos --seed 1 --profile long` does the same from a shell. The modules:
`workload` (what is submitted), `fleet` (the worker and operator processes), `bucket` (the S3
server, its bucket and the fault proxy in front of it), `faults` (the faults injected at
random), `servers` (the restarts of etcd, kube-apiserver and the S3 server), `recorder` (what
is seen while it runs), `end` (the drain, the settling of the bucket, the final read), `final`
(the state read at the end), `history` (all records, loaded), `invariants` (the checks, pure,
one module per group), `outcome` (the verdict's line and report) and `run` (one run from start
to verdict).
"""

from recall_dev.chaos.outcome import Outcome
from recall_dev.chaos.run import run
from recall_dev.chaos.workload import PROFILES, Profile

__all__ = ["PROFILES", "Outcome", "Profile", "run"]
