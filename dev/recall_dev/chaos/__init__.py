"""Chaos runs of the whole system on the local control plane, checked against DESIGN §5.

    from recall_dev.chaos import PROFILES, run
    outcome = run(seed=1, profile=PROFILES["short"], workdir=path)
    print(outcome.line)

`python -m recall_dev.chaos --seed 1 --profile long` does the same from a shell. The modules:
`workload` (what is submitted), `fleet` (the worker and operator processes), `faults` (the
faults injected at random), `servers` (the control-plane restarts), `recorder` (what is seen
while it runs), `final` (the state read at the end), `history` (all records, loaded),
`invariants` (the checks, pure, one module per group), `outcome` (the verdict's line and
report) and `run` (one run from start to verdict).
"""

from recall_dev.chaos.outcome import Outcome
from recall_dev.chaos.run import run
from recall_dev.chaos.workload import PROFILES, Profile

__all__ = ["PROFILES", "Outcome", "Profile", "run"]
