"""Validated settings of the worker and the operator, from `RECALL_*` environment variables.

Command-line options override the environment; both end up in these objects, which check
the relations between fields (for example that the heartbeat is well inside the lease).

One module a part: `shared` (the API server and the object store), `worker`, `operator`;
each class is imported from here.
"""

from recall.base.settings.operator import OperatorSettings, PoolScaling
from recall.base.settings.shared import SCHEMES, ApiSettings, StoreSettings
from recall.base.settings.worker import WorkerSettings, default_model_cache_dir

__all__ = [
    "SCHEMES",
    "ApiSettings",
    "OperatorSettings",
    "PoolScaling",
    "StoreSettings",
    "WorkerSettings",
    "default_model_cache_dir",
]
