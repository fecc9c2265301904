"""Chaos runs of the whole system on the local control plane, checked against DESIGN §5.

    from recall_dev.chaos import PROFILES, run
    outcome = run(seed=1, profile=PROFILES["short"], workdir=path)
    print(outcome.line)

`python -m recall_dev.chaos --seed 1 --profile long` does the same from a shell. The modules:
`workload` (what is submitted), `fleet` (the worker and operator processes), `recorder` (what
is seen while it runs), `history` (all records, loaded), `invariants` (the checks, pure) and
`run` (one run from start to verdict).
"""

from recall_dev.chaos.run import Outcome, run
from recall_dev.chaos.workload import PROFILES, Profile

__all__ = ["PROFILES", "Outcome", "Profile", "run"]
