"""The twins of what the runtime is given, for unit tests and benchmarks: the API server in
memory and a clock moved by hand. Never in the image; the real API server stays the judge of
semantics in the integration tests.

- `verbs`: `MemoryVerbs`, the verbs of `recall.kube.verbs` over a dict (resourceVersion and
  409, the status and scale subresources, watches, fault injection);
- `rules`: what the API server checks and fills in (the CRDs' defaults and CEL rules);
- `select`: JSON patches and the field and label selectors;
- `api`: `MemoryApi`, the typed calls of `recall.kube.typed` over the twin, with the controls
  a test plays the cluster with;
- `clock`: `FakeClock`.
"""

from recall_dev.twin.api import MemoryApi
from recall_dev.twin.clock import EPOCH, FakeClock
from recall_dev.twin.verbs import Fault, MemoryVerbs

__all__ = ["EPOCH", "FakeClock", "Fault", "MemoryApi", "MemoryVerbs"]
